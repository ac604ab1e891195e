// The policy over HTTP for env servers: serve/'s vLLM generate route, each request served by the rollout its
// header names and recorded there; a request naming no open rollout is refused.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { EndpointServer, ROLLOUT_HEADER } from "../../actors/runtime/model-endpoint/endpoint-server.js";
import { ScriptedModelClient } from "../../environments/testing/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";

const tok = new ByteTokenizer();
const server = await EndpointServer.start({ limits: { vocabSize: tok.vocabSize, contextTokens: 64 } });
after(() => server.close());
const sampling = { temperature: 0.5, topP: 1, topK: 0, maxTokens: 6 };

async function post(headers: Record<string, string>, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${server.baseUrl}/inference/v1/generate`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

test("a request under a rollout's header is served by its client, capped at its sampling, and recorded", async () => {
  const a = new ScriptedModelClient(tok, ["alpha-long-reply"], { policyVersion: 7 });
  const b = new ScriptedModelClient(tok, ["beta"], { policyVersion: 2 });
  const sa = server.open(a, sampling);
  const sb = server.open(b, sampling);
  const prompt = tok.applyChatTemplate([{ role: "user", content: "hi" }], { addGenerationPrompt: true });
  const r = await post(sa.headers, { token_ids: prompt, sampling_params: { max_tokens: 100, temperature: 1, logprobs: 0 } });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  const choice = (r.json["choices"] as Array<Record<string, unknown>>)[0]!;
  assert.deepEqual(choice["token_ids"], tok.encode("alpha-"), "capped at the session's 6 tokens");
  assert.equal(choice["finish_reason"], "length");
  assert.deepEqual(choice["weight_versions"], [{ version: "7", start: 0, end: 6 }]);
  assert.equal(a.calls[0]!.args.temperature, 0.5, "the task's temperature, not the request's");
  assert.equal(sa.calls.length, 1);
  assert.deepEqual(sa.calls[0]!.promptIds, prompt);
  assert.equal(sb.calls.length, 0, "the other rollout saw nothing");
  assert.equal(b.calls.length, 0);
  sa.close();
  sb.close();
});

test("no header, or a closed rollout's: 400 with the reason, nothing generated", async () => {
  const m = new ScriptedModelClient(tok, ["x"]);
  const s = server.open(m, sampling);
  s.close();
  const none = await post({}, { token_ids: [1, 2], sampling_params: {} });
  assert.equal(none.status, 400);
  assert.match(JSON.stringify(none.json), /no x-rollstream-rollout header/);
  const closed = await post({ [ROLLOUT_HEADER]: s.headers[ROLLOUT_HEADER]! }, { token_ids: [1, 2], sampling_params: {} });
  assert.equal(closed.status, 400);
  assert.match(JSON.stringify(closed.json), /is not open here/);
  assert.equal(m.calls.length, 0);
});
