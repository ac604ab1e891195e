// vLLM's POST /inference/v1/generate over rollstream's engine, checked field by field against upstream's
// GenerateRequest / GenerateTokensResponse: the tokens are exactly what the model gives the request alone with
// its seed, logprobs.content follows token_ids, finish_reason says why it ended, weight_versions covers the output,
// prompt_token_ids only when asked, streaming gives the same tokens; bad requests get a 400 with one line.
import { test } from "node:test";
import assert from "node:assert/strict";
import Fastify from "fastify";
import { installErrorHandler } from "../../serve/http-errors.js";
import { registerVllmGenerateRoute } from "../../serve/vllm-generate-route.js";
import { alone, promptOf, tinyEngine, tok } from "../helpers/serve-fixture.js";

async function appOver() {
  const t = tinyEngine();
  const app = Fastify();
  installErrorHandler(app, () => undefined);
  registerVllmGenerateRoute(app, t.engine, { modelName: "tiny" });
  await app.ready();
  return { ...t, app };
}

const post = (app: Awaited<ReturnType<typeof appOver>>["app"], body: unknown) =>
  app.inject({ method: "POST", url: "/inference/v1/generate", payload: body as object });

test("generate: every field of the answer, against the model alone", async () => {
  const { app, model, policy } = await appOver();
  try {
    const prompt = promptOf("2+2=");
    const res = await post(app, {
      request_id: "r-1",
      token_ids: prompt,
      sampling_params: { max_tokens: 12, temperature: 1, top_p: 1, top_k: -1, logprobs: 0, seed: 7, stop_token_ids: [] },
      cache_salt: "run:v0",
      return_token_ids: true,
    });
    assert.equal(res.statusCode, 200, res.body);
    const b = res.json();
    const ref = await alone(model, prompt, { maxTokens: 12, seed: 7 });
    assert.equal(b.request_id, "r-1");
    assert.equal(b.output_mode, "tokens");
    assert.equal(b.model, "tiny");
    const c = b.choices[0];
    assert.equal(c.index, 0);
    assert.deepEqual(c.token_ids, ref.tokenIds, "the tokens the model gives the request alone");
    assert.deepEqual(
      c.logprobs.content.map((x: { token_id: number }) => x.token_id),
      ref.tokenIds,
    );
    assert.deepEqual(
      c.logprobs.content.map((x: { logprob: number }) => x.logprob),
      ref.logprobs,
    );
    assert.equal(c.finish_reason, ref.stopReason === "length" ? "length" : "stop");
    assert.deepEqual(c.weight_versions, [{ version: "0", start: 0, end: ref.tokenIds.length }]);
    assert.deepEqual(b.prompt_token_ids, prompt);
    assert.deepEqual(b.usage, { prompt_tokens: prompt.length, completion_tokens: ref.tokenIds.length, total_tokens: prompt.length + ref.tokenIds.length });

    // Another seed draws other tokens (the seed is honoured); without return_token_ids or logprobs, neither comes back.
    const other = (await post(app, { token_ids: prompt, sampling_params: { max_tokens: 12, seed: 8 } })).json();
    assert.notDeepEqual(other.choices[0].token_ids, c.token_ids);
    assert.deepEqual(other.choices[0].token_ids, (await alone(model, prompt, { maxTokens: 12, seed: 8 })).tokenIds);
    assert.equal(other.prompt_token_ids, null);
    assert.equal(other.choices[0].logprobs, null);
    assert.match(other.request_id, /^[0-9a-f-]{36}$/);
  } finally {
    await app.close();
    await policy.dispose();
  }
});

test("generate: stop_token_ids end it with finish_reason stop on that token; max_tokens defaults to 16", async () => {
  const { app, model, policy } = await appOver();
  try {
    const prompt = promptOf("hello");
    const free = await alone(model, prompt, { maxTokens: 16, seed: 3, temperature: 0 });
    assert.ok(free.tokenIds.length >= 4, "greedy output long enough to stop inside it");
    const stopAt = free.tokenIds[2]!;
    const res = (await post(app, { token_ids: prompt, sampling_params: { temperature: 0, seed: 3, stop_token_ids: [stopAt] } })).json();
    const c = res.choices[0];
    const first = free.tokenIds.indexOf(stopAt);
    assert.deepEqual(c.token_ids, free.tokenIds.slice(0, first + 1));
    assert.equal(c.finish_reason, "stop");
    const unstopped = (await post(app, { token_ids: prompt, sampling_params: { temperature: 0, seed: 3, ignore_eos: true } })).json();
    assert.equal(unstopped.choices[0].token_ids.length, 16, "vLLM's default max_tokens");
    assert.equal(unstopped.choices[0].finish_reason, "length");
  } finally {
    await app.close();
    await policy.dispose();
  }
});

test("generate: streamed as SSE, the same tokens, spans on the last chunk", async () => {
  const { app, model, policy } = await appOver();
  try {
    await app.listen({ port: 0, host: "127.0.0.1" });
    const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}/inference/v1/generate`;
    const prompt = promptOf("abc");
    const body = { token_ids: prompt, stream: true, sampling_params: { max_tokens: 10, seed: 11, logprobs: 0 } };
    const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    assert.equal(res.headers.get("content-type"), "text/event-stream");
    const events = (await res.text())
      .split("\n\n")
      .filter((e) => e.startsWith("data: "))
      .map((e) => e.slice(6));
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    const ids = chunks.flatMap((c) => c.choices[0].token_ids);
    const ref = await alone(model, prompt, { maxTokens: 10, seed: 11 });
    assert.deepEqual(ids, ref.tokenIds);
    assert.deepEqual(
      chunks.flatMap((c) => c.choices[0].logprobs?.content.map((x: { logprob: number }) => x.logprob) ?? []),
      ref.logprobs,
    );
    const last = chunks.at(-1).choices[0];
    assert.ok(last.finish_reason);
    assert.deepEqual(last.weight_versions, [{ version: "0", start: 0, end: ids.length }]);
    assert.ok(chunks.slice(0, -1).every((c) => c.choices[0].finish_reason === null));
  } finally {
    await app.close();
    await policy.dispose();
  }
});

test("generate: bad requests get a 400 with one line naming the field; the server goes on", async () => {
  const { app, policy } = await appOver();
  try {
    const ok = { token_ids: [1, 2, 3], sampling_params: { max_tokens: 2 } };
    const cases: [unknown, RegExp][] = [
      [{ sampling_params: {} }, /token_ids/],
      [{ ...ok, token_ids: [] }, /token_ids/],
      [{ ...ok, token_ids: [1, -2] }, /token_ids\.1/],
      [{ ...ok, token_ids: [1, tok.vocabSize] }, /token_ids\[1\].*vocabulary/],
      [{ ...ok, token_ids: Array(300).fill(1) }, /context window/],
      [{ ...ok, sampling_params: { max_tokens: 0 } }, /sampling_params\.max_tokens/],
      [{ ...ok, sampling_params: { top_p: 0 } }, /sampling_params\.top_p/],
      [{ ...ok, sampling_params: { temperature: -1 } }, /sampling_params\.temperature/],
      [{ ...ok, sampling_params: { max_new_tokens: 3 } }, /max_new_tokens/],
      [{ ...ok, output_mode: "text" }, /output_mode/],
      [{ ...ok, cache_salt: "" }, /cache_salt/],
      [{ ...ok, unknown_field: 1 }, /unknown_field/],
      [{ ...ok, sampling_params: { repetition_penalty: 1.2 } }, /repetition_penalty is not served/],
      [{ ...ok, sampling_params: { n: 2 } }, /n > 1 is not served/],
    ];
    for (const [body, why] of cases) {
      const res = await post(app, body);
      assert.equal(res.statusCode, 400, `${JSON.stringify(body).slice(0, 80)} -> ${res.body}`);
      const msg = res.json().error.message as string;
      assert.match(msg, why);
      assert.ok(!msg.includes("\n"), "one line");
    }
    const bad = await app.inject({ method: "POST", url: "/inference/v1/generate", headers: { "content-type": "application/json" }, payload: "{not json" });
    assert.equal(bad.statusCode, 400);
    // Positive controls: a client sending vLLM's defaults is served, and so is the plain request.
    const defaults = { n: 1, min_p: 0, min_tokens: 0, presence_penalty: 0, frequency_penalty: 0, repetition_penalty: 1, skip_special_tokens: true };
    assert.equal((await post(app, { ...ok, sampling_params: { ...ok.sampling_params, ...defaults } })).statusCode, 200);
    const res = await post(app, ok);
    assert.equal(res.statusCode, 200);
    assert.equal(res.json().choices[0].token_ids.length, 2);
  } finally {
    await app.close();
    await policy.dispose();
  }
});
