// The SGLang and vLLM clients against test servers written from the upstream schemas: every field a request
// sends and every field an answer carries that the client reads.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SglangServer } from "../../actors/inference/fleet/sglang.js";
import { RollstreamServer, VllmServer } from "../../actors/inference/fleet/vllm.js";
import { RequestRejected, ServerDown } from "../../actors/inference/fleet/http.js";
import type { SegmentRequest } from "../../actors/inference/fleet/engine-server.js";
import { TestEngineServer } from "../helpers/test-engine-server.js";
import { scriptedSource } from "../helpers/engine-double.js";

const req: SegmentRequest = {
  requestId: "run.task-1.0.1.1",
  tokenIds: [1, 104, 105],
  maxTokens: 5,
  temperature: 0.7,
  topP: 0.9,
  topK: 0,
  seed: 42,
  stopTokenIds: [257, 259],
  cacheKey: "run:v3",
};
const opts = { deadlineMs: 5_000 };

test("SGLang /generate: every request field sent, every answer field read", async () => {
  const s = await TestEngineServer.sglang({ source: scriptedSource({ stopAfter: { token: 259, steps: 5 } }) });
  try {
    s.engine.label = "3";
    const seg = await new SglangServer(s.url).generate(req, opts);
    const sent = s.engine.received.find((r) => r.route === "/generate")!.body;
    assert.deepEqual(sent, {
      rid: "run.task-1.0.1.1",
      input_ids: [1, 104, 105],
      sampling_params: { max_new_tokens: 5, temperature: 0.7, top_p: 0.9, top_k: -1, stop_token_ids: [257, 259], sampling_seed: 42 },
      return_logprob: true,
      logprob_start_len: -1,
      stream: false,
      extra_key: "run:v3",
    });
    // 3 prompt tokens, then the stop token once the sequence holds 5: 3 sampled, the last one the stop token.
    assert.equal(seg.tokenIds.length, 3);
    assert.equal(seg.tokenIds[2], 259);
    assert.equal(seg.finish, "stop");
    assert.equal(seg.logprobs.length, 3);
    assert.ok(seg.logprobs.every((l) => l < 0));
    assert.deepEqual(seg.versionSpans, [{ version: 3, start: 0, end: 3 }]);
    // top_k > 0 goes through as is.
    await new SglangServer(s.url).generate({ ...req, topK: 5 }, opts);
    assert.equal((s.engine.received.at(-1)!.body as { sampling_params: { top_k: number } }).sampling_params.top_k, 5);
  } finally {
    await s.kill();
  }
});

test("SGLang: a server's own version labels that are not ours are ignored; an older server without them reports none", async () => {
  const s = await TestEngineServer.sglang();
  const old = await TestEngineServer.sglang({ reportVersions: false });
  try {
    const seg = await new SglangServer(s.url).generate(req, opts); // label "default"
    assert.equal(seg.versionSpans, undefined);
    assert.equal(seg.finish, "length");
    assert.equal(seg.tokenIds.length, 5);
    assert.equal((await new SglangServer(old.url).generate(req, opts)).versionSpans, undefined);
  } finally {
    await s.kill();
    await old.kill();
  }
});

test("SGLang /update_weights_from_disk: model_path, weight_version, abort_all_requests; a failed load is the server's failure", async (t) => {
  const s = await TestEngineServer.sglang();
  const dir = exportedFolder(t);
  try {
    const client = new SglangServer(s.url);
    await client.loadWeights(dir, 7, opts);
    assert.deepEqual(s.engine.received.at(-1), {
      route: "/update_weights_from_disk",
      body: { model_path: dir, weight_version: "7", abort_all_requests: true },
    });
    assert.equal(s.engine.label, "7");
    s.engine.failUpdates = true;
    await assert.rejects(client.loadWeights(dir, 8, opts), ServerDown);
    assert.equal(s.engine.label, "7");
    assert.equal(await client.healthy(opts), true);
    s.engine.unhealthy = true;
    assert.equal(await client.healthy(opts), false);
  } finally {
    await s.kill();
  }
});

test("vLLM /inference/v1/generate: every request field sent, every answer field read", async () => {
  const s = await TestEngineServer.vllm({ source: scriptedSource({ stopAfter: { token: 257, steps: 4 } }) });
  try {
    s.engine.label = "3";
    const seg = await new VllmServer(s.url, { pauseMode: "abort", weightsRoute: "/update_weights" }).generate(req, opts);
    assert.deepEqual(s.engine.received.at(-1)!.body, {
      request_id: "run.task-1.0.1.1",
      token_ids: [1, 104, 105],
      sampling_params: { max_tokens: 5, temperature: 0.7, top_p: 0.9, top_k: 0, logprobs: 0, seed: 42, stop_token_ids: [257, 259] },
      cache_salt: "run:v3",
      return_token_ids: true,
      output_mode: "tokens",
      stream: false,
    });
    assert.equal(seg.tokenIds.length, 2);
    assert.equal(seg.tokenIds[1], 257);
    assert.equal(seg.finish, "stop");
    assert.equal(seg.logprobs.length, 2);
    assert.deepEqual(seg.versionSpans, [{ version: 3, start: 0, end: 2 }]);
  } finally {
    await s.kill();
  }
});

test("vLLM weight update: /pause?mode=, the reload route with weight_dir, /update_weight_version, /resume, in that order", async (t) => {
  const s = await TestEngineServer.vllm();
  const dir = exportedFolder(t);
  try {
    const client = new VllmServer(s.url, { pauseMode: "keep", weightsRoute: "/update_weights" });
    await client.loadWeights(dir, 4, opts);
    assert.deepEqual(
      s.engine.received.map((r) => [r.route, r.body]),
      [
        ["/pause?mode=keep", {}],
        ["/update_weights", { weight_dir: dir }],
        ["/update_weight_version", { new_version: "4" }],
        ["/resume", {}],
      ],
    );
    assert.equal(s.engine.label, "4");
    // A failed reload still resumes the server (it leaves rotation, it is not left paused).
    s.engine.failUpdates = true;
    await assert.rejects(client.loadWeights(dir, 5, opts), ServerDown);
    assert.equal(s.engine.received.at(-1)!.route, "/resume");
  } finally {
    await s.kill();
  }
});

test("rollstream: vLLM's generate route, SGLang's update_weights_from_disk", async (t) => {
  const s = await TestEngineServer.sglang();
  const dir = exportedFolder(t);
  try {
    await new RollstreamServer(s.url, { pauseMode: "abort", weightsRoute: "/update_weights" }).loadWeights(dir, 2, opts);
    assert.equal(s.engine.received.at(-1)!.route, "/update_weights_from_disk");
    assert.equal(s.engine.label, "2");
  } finally {
    await s.kill();
  }
});

test("errors: a 4xx is the request's, unreachable or off-protocol is the server's", async () => {
  const s = await TestEngineServer.vllm();
  const client = new VllmServer(s.url, { pauseMode: "abort", weightsRoute: "/update_weights" });
  try {
    await assert.rejects(client.generate({ ...req, tokenIds: [] }, opts), RequestRejected);
    await assert.rejects(new SglangServer(s.url).generate(req, opts), RequestRejected); // no /generate there: 404
  } finally {
    await s.kill();
  }
  await assert.rejects(client.generate(req, opts), (e: unknown) => e instanceof ServerDown && /unreachable/.test(e.message));
});

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A folder with what a server checks before loading (config.json, model.safetensors). */
function exportedFolder(t: { after(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), "rs-hf-"));
  writeFileSync(join(dir, "config.json"), "{}");
  writeFileSync(join(dir, "model.safetensors"), "x");
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}
