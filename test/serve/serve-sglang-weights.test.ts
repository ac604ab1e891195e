// SGLang's /generate and /update_weights_from_disk on a real `rollstream serve`, field by field; a weight update
// changes what is served and the version answers record (weight_version, weight_versions), a request in flight
// across an update carries both versions in its spans (keep) or ends with its partial output (abort_all_requests);
// pause keep|abort and resume; bad requests and bad folders are 400s and the old weights stay.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServe, type RunningServer } from "../../serve/start.js";
import { alone, promptOf, tinyModel, tok, writeHfFolder } from "../helpers/serve-fixture.js";

let server: RunningServer;
let dir: string;
const quiet = { info: () => undefined, error: () => undefined };
/** A parsed JSON answer. */
type Json = ReturnType<typeof JSON.parse>;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "rs-serve-sgl-"));
  writeHfFolder(join(dir, "v0"), 3);
  writeHfFolder(join(dir, "v7"), 4);
  server = await startServe({ source: { kind: "folder", path: join(dir, "v0") }, host: "127.0.0.1", port: 0, threads: 1, log: quiet });
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

async function post(path: string, body: unknown): Promise<{ status: number; json: Json }> {
  const res = await fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

const sgl = (input_ids: number[], sampling_params: object) => post("/generate", { input_ids, sampling_params, return_logprob: true });

test("sglang /generate: every field, against the model alone; a stop id ends it with finish_reason stop", async () => {
  const m = tinyModel(3);
  try {
    const prompt = promptOf("9-4=");
    const r = await sgl(prompt, { max_new_tokens: 9, temperature: 1, top_p: 1, top_k: -1, sampling_seed: 12 });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const ref = await alone(m, prompt, { maxTokens: 9, seed: 12 });
    const mi = r.json.meta_info;
    assert.deepEqual(
      mi.output_token_logprobs.map((x: unknown[]) => x[1]),
      ref.tokenIds,
    );
    assert.deepEqual(
      mi.output_token_logprobs.map((x: unknown[]) => x[0]),
      ref.logprobs,
    );
    assert.ok(mi.output_token_logprobs.every((x: unknown[]) => x[2] === null));
    assert.deepEqual(r.json.output_ids, ref.tokenIds);
    assert.equal(r.json.text, tok.decode(ref.tokenIds, { skipSpecial: true }));
    assert.equal(mi.prompt_tokens, prompt.length);
    assert.equal(mi.completion_tokens, ref.tokenIds.length);
    assert.equal(mi.weight_version, "0");
    assert.deepEqual(mi.weight_versions, [{ version: "0", start: 0, end: ref.tokenIds.length }]);
    if (ref.stopReason === "length") assert.deepEqual(mi.finish_reason, { type: "length", length: 9 });
    else assert.equal(mi.finish_reason.type, "stop");

    const greedy = await alone(m, prompt, { maxTokens: 12, seed: 0, temperature: 0 });
    const at = greedy.tokenIds[3]!;
    const stopped = await sgl(prompt, { max_new_tokens: 12, temperature: 0, stop_token_ids: [at] });
    assert.deepEqual(stopped.json.output_ids, greedy.tokenIds.slice(0, greedy.tokenIds.indexOf(at) + 1));
    assert.deepEqual(stopped.json.meta_info.finish_reason, { type: "stop", matched: at });
  } finally {
    m.dispose();
  }
});

test("update_weights_from_disk changes what is served and the version answers carry", async () => {
  const [m3, m4] = [tinyModel(3), tinyModel(4)];
  try {
    const prompt = promptOf("1+1=");
    const ref3 = await alone(m3, prompt, { maxTokens: 10, seed: 5 });
    const ref4 = await alone(m4, prompt, { maxTokens: 10, seed: 5 });
    assert.notDeepEqual(ref3.tokenIds, ref4.tokenIds, "the two weights sample differently (positive control)");
    const before = await sgl(prompt, { max_new_tokens: 10, sampling_seed: 5 });
    assert.deepEqual(before.json.output_ids, ref3.tokenIds);

    const up = await post("/update_weights_from_disk", { model_path: join(dir, "v7"), weight_version: "7", abort_all_requests: false });
    assert.equal(up.status, 200, JSON.stringify(up.json));
    assert.equal(up.json.success, true);
    assert.match(up.json.message, /Weight version updated to 7/);
    assert.equal(up.json.num_paused_requests, 0);

    const after = await sgl(prompt, { max_new_tokens: 10, sampling_seed: 5 });
    assert.deepEqual(after.json.output_ids, ref4.tokenIds);
    assert.equal(after.json.meta_info.weight_version, "7");
    const v = await post("/inference/v1/generate", { token_ids: prompt, sampling_params: { max_tokens: 10, seed: 5 } });
    assert.deepEqual(v.json.choices[0].token_ids, ref4.tokenIds);
    assert.deepEqual(v.json.choices[0].weight_versions, [{ version: "7", start: 0, end: ref4.tokenIds.length }]);
    assert.equal((await (await fetch(`${server.url}/get_weight_version`)).json()).weight_version, "7");
    const log = await (await fetch(`${server.url}/weight_updates`)).json();
    assert.deepEqual(
      log.updates.map((u: { version: string }) => u.version),
      ["0", "7"],
    );

    // Bad folders: a 400 with success false, and the weights in use stay.
    const missing = await post("/update_weights_from_disk", { model_path: join(dir, "nope"), weight_version: "8" });
    assert.equal(missing.status, 400);
    assert.equal(missing.json.success, false);
    assert.match(missing.json.message, /not an HF model folder/);
    const other = join(dir, "other");
    writeHfFolder(other, 4);
    writeFileSync(join(other, "config.json"), JSON.stringify({ ...JSON.parse(readFileSync(join(dir, "v0", "config.json"), "utf8")), num_hidden_layers: 3 }));
    const wrong = await post("/update_weights_from_disk", { model_path: other, weight_version: "9" });
    assert.equal(wrong.status, 400);
    assert.match(wrong.json.message, /another model than the one served: numLayers 3/);
    const still = await sgl(prompt, { max_new_tokens: 10, sampling_seed: 5 });
    assert.deepEqual(still.json.output_ids, ref4.tokenIds);
    assert.equal(still.json.meta_info.weight_version, "7");
    assert.equal((await post("/update_weights_from_disk", {})).status, 400);
  } finally {
    m3.dispose();
    m4.dispose();
  }
});

/** Starts a long streamed generation and resolves once its first token arrived; `rest` is the whole answer. */
async function streamStarted(prompt: number[]): Promise<{ rest: Promise<Json[]> }> {
  const res = await fetch(`${server.url}/inference/v1/generate`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ token_ids: prompt, stream: true, sampling_params: { max_tokens: 200, seed: 1, ignore_eos: true, logprobs: 0 } }),
  });
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = "";
  const chunks: Json[] = [];
  const pump = async (untilFirst: boolean): Promise<void> => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let i: number;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (ev.startsWith("data: ") && ev !== "data: [DONE]") chunks.push(JSON.parse(ev.slice(6)));
      }
      if (untilFirst && chunks.length > 0) return;
    }
  };
  await pump(true);
  return { rest: pump(false).then(() => chunks) };
}

test("an update mid-generation: paused in keep mode, the request goes on under the new weights and its spans say so", async () => {
  await post("/update_weights_from_disk", { model_path: join(dir, "v0"), weight_version: "10" });
  const s = await streamStarted(promptOf("long"));
  const paused = await post("/pause?mode=keep", {});
  assert.equal(paused.status, 200);
  assert.equal((await (await fetch(`${server.url}/is_paused`)).json()).is_paused, true);
  const up = await post("/update_weights_from_disk", { model_path: join(dir, "v7"), weight_version: "11", abort_all_requests: false });
  assert.equal(up.json.success, true);
  await post("/resume", {});
  assert.equal((await (await fetch(`${server.url}/is_paused`)).json()).is_paused, false);
  const chunks = await s.rest;
  const last = chunks.at(-1).choices[0];
  const n = chunks.reduce((k, c) => k + c.choices[0].token_ids.length, 0);
  assert.equal(last.finish_reason, "length");
  assert.equal(n, 200);
  assert.equal(last.weight_versions.length, 2, JSON.stringify(last.weight_versions));
  const [a, b] = last.weight_versions;
  assert.equal(a.version, "10");
  assert.equal(b.version, "11");
  assert.ok(a.start === 0 && a.end === b.start && b.end === 200 && a.end >= 1);
});

test("abort_all_requests: a request in flight ends with finish_reason abort and its partial output", async () => {
  const s = await streamStarted(promptOf("abort me"));
  await post("/pause?mode=keep", {});
  const up = await post("/update_weights_from_disk", { model_path: join(dir, "v0"), weight_version: "12", abort_all_requests: true });
  assert.equal(up.json.success, true);
  assert.equal(up.json.num_paused_requests, 1);
  await post("/resume", {});
  const chunks = await s.rest;
  const last = chunks.at(-1).choices[0];
  const n = chunks.reduce((k, c) => k + c.choices[0].token_ids.length, 0);
  assert.equal(last.finish_reason, "abort");
  assert.ok(n >= 1 && n < 200);
  assert.deepEqual(last.weight_versions, [{ version: "11", start: 0, end: n }]);
});

test("pause abort, and bad control requests are 400s", async () => {
  const s = await streamStarted(promptOf("x"));
  const p = await post("/pause?mode=abort", {});
  assert.equal(p.json.num_aborted_requests, 1);
  const chunks = await s.rest;
  assert.equal(chunks.at(-1).choices[0].finish_reason, "abort");
  // While paused, a new request waits; resume lets it through.
  const waiting = sgl(promptOf("y"), { max_new_tokens: 3 });
  let done = false;
  void waiting.then(() => (done = true));
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(done, false, "a request waits while paused");
  await post("/resume", {});
  assert.equal((await waiting).status, 200);
  assert.equal((await post("/pause?mode=bogus", {})).status, 400);
  assert.equal((await post("/generate", { text: "a", input_ids: [1], sampling_params: {} })).status, 400);
  assert.equal((await post("/generate", { input_ids: [1], sampling_params: { top_k: 0 } })).status, 400);
  assert.equal((await post("/update_weights", { version: 3 })).status, 400, "no object store without --config");
});
