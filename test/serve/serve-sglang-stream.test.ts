// SGLang's /generate with sampling_params.n > 1 (a list of n results, sample i drawn with sampling_seed + i) and
// with stream: true (server-sent events, one cumulative result per token, finish_reason on the last, then
// data: [DONE]), on a real `rollstream serve`, raw HTTP, each against the model alone.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServe, type RunningServer } from "../../serve/start.js";
import { alone, promptOf, tinyModel, writeHfFolder } from "../helpers/serve-fixture.js";

let server: RunningServer;
let dir: string;
const quiet = { info: () => undefined, error: () => undefined };
type Json = ReturnType<typeof JSON.parse>;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "rs-serve-sgl-stream-"));
  writeHfFolder(join(dir, "v0"), 3);
  server = await startServe({ source: { kind: "folder", path: join(dir, "v0") }, host: "127.0.0.1", port: 0, threads: 1, log: quiet });
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

function post(body: unknown): Promise<Response> {
  return fetch(`${server.url}/generate`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

test("sampling_params.n: a list of n results, sample i as the model alone draws it with sampling_seed + i", async () => {
  const m = tinyModel(3);
  try {
    const prompt = promptOf("5+6=");
    const res = await post({ input_ids: prompt, sampling_params: { max_new_tokens: 8, sampling_seed: 40, n: 3 }, return_logprob: true });
    const body = (await res.json()) as Json;
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.ok(Array.isArray(body) && body.length === 3, "a list of three results");
    for (let i = 0; i < 3; i++) {
      const ref = await alone(m, prompt, { maxTokens: 8, seed: 40 + i });
      assert.deepEqual(body[i].output_ids, ref.tokenIds, `sample ${i}`);
      assert.deepEqual(
        body[i].meta_info.output_token_logprobs.map((x: unknown[]) => x[0]),
        ref.logprobs,
      );
      assert.equal(body[i].meta_info.prompt_tokens, prompt.length);
    }
    assert.ok(new Set(body.map((r: Json) => JSON.stringify(r.output_ids))).size > 1, "positive control: the samples differ");
    // n 1 (the default) is one result, not a list.
    const one = (await (await post({ input_ids: prompt, sampling_params: { max_new_tokens: 2, sampling_seed: 40 } })).json()) as Json;
    assert.ok(!Array.isArray(one) && Array.isArray(one.output_ids));
  } finally {
    m.dispose();
  }
});

test("stream: cumulative results after each token, finish_reason on the last, then [DONE]; the tokens the model alone draws", async () => {
  const m = tinyModel(3);
  try {
    const prompt = promptOf("7+1=");
    const ref = await alone(m, prompt, { maxTokens: 10, seed: 9 });
    const res = await post({ input_ids: prompt, sampling_params: { max_new_tokens: 10, sampling_seed: 9 }, return_logprob: true, stream: true });
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /text\/event-stream/);
    const events = (await res.text())
      .split("\n\n")
      .filter((e) => e.trim())
      .map((e) => e.replace(/^data: /, ""));
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    assert.equal(chunks.length, ref.tokenIds.length + 1, "one chunk per token, and the finished result");
    chunks.slice(0, -1).forEach((c, i) => {
      assert.deepEqual(c.output_ids, ref.tokenIds.slice(0, i + 1), `chunk ${i} holds the tokens so far`);
      assert.equal(c.meta_info.finish_reason, null);
    });
    const last = chunks.at(-1);
    assert.deepEqual(last.output_ids, ref.tokenIds);
    assert.deepEqual(
      last.meta_info.output_token_logprobs.map((x: unknown[]) => x[0]),
      ref.logprobs,
    );
    assert.ok(["stop", "length"].includes(last.meta_info.finish_reason.type));
    assert.deepEqual(last.meta_info.weight_versions, [{ version: "0", start: 0, end: ref.tokenIds.length }]);
    // A stream of several samples is refused by name.
    const bad = await post({ input_ids: prompt, sampling_params: { max_new_tokens: 2, n: 2 }, stream: true });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as Json).error.message, /sampling_params\.n/);
  } finally {
    m.dispose();
  }
});

test("top_logprobs_num: meta_info.output_top_logprobs[i] holds the k most likely [logprob, token_id, text], most likely first", async () => {
  const prompt = promptOf("1+1=");
  const res = await post({ input_ids: prompt, sampling_params: { max_new_tokens: 5, sampling_seed: 4 }, return_logprob: true, top_logprobs_num: 3 });
  const body = (await res.json()) as Json;
  assert.equal(res.status, 200, JSON.stringify(body));
  const mi = body.meta_info;
  assert.equal(mi.output_top_logprobs.length, body.output_ids.length);
  mi.output_top_logprobs.forEach((top: [number, number, null][], i: number) => {
    assert.equal(top.length, 3);
    assert.ok(top[0]![0] >= top[1]![0] && top[1]![0] >= top[2]![0]);
    assert.ok(top.every((x) => Number.isInteger(x[1]) && x[2] === null));
    // At temperature 1 the sampled token's logprob is its own in that distribution: never above the most likely.
    assert.ok(mi.output_token_logprobs[i][0] <= top[0]![0] + 1e-6);
    const same = top.find((x) => x[1] === body.output_ids[i]);
    if (same) assert.ok(Math.abs(same[0] - mi.output_token_logprobs[i][0]) < 1e-4);
  });
  // Positive control: without it there are none.
  const plain = (await (await post({ input_ids: prompt, sampling_params: { max_new_tokens: 2 }, return_logprob: true })).json()) as Json;
  assert.equal(plain.meta_info.output_top_logprobs, undefined);
});
