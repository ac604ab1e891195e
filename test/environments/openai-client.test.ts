import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { OpenAICompletionsClient } from "../../environments/clients/openai.js";
import { singleTurnRollout } from "../../environments/api/index.js";
import { ByteChatTokenizer } from "../../environments/testing/index.js";

// A stand-in OpenAI-compatible server that answers from a queue and records requests.
const requests: Array<{ url: string; auth?: string; body: Record<string, unknown> }> = [];
const replies: Array<{ status?: number; body: unknown }> = [];
const server = createServer((req: IncomingMessage, res: ServerResponse) => {
  let data = "";
  req.on("data", (c: Buffer) => (data += c.toString()));
  req.on("end", () => {
    requests.push({ url: req.url ?? "", auth: req.headers.authorization, body: JSON.parse(data) as Record<string, unknown> });
    const r = replies.shift() ?? { status: 500, body: { error: "no reply queued" } };
    res.writeHead(r.status ?? 200, { "content-type": "application/json" });
    res.end(typeof r.body === "string" ? r.body : JSON.stringify(r.body));
  });
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
after(() => server.close());
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
const tok = new ByteChatTokenizer();
const sampling = { temperature: 0.7, topP: 0.9, topK: 20, maxTokens: 8 };

test("token-id prompts out, token ids and logprobs back (vLLM return_tokens_as_token_ids)", async () => {
  const client = new OpenAICompletionsClient({ baseUrl: `${base}/v1/`, model: "m", tokenizer: tok, apiKey: "k", policyVersion: 2 });
  const ids = [...tok.encode("82"), ByteChatTokenizer.IM_END];
  replies.push({
    body: {
      choices: [
        { text: "82", finish_reason: "stop", stop_reason: null, logprobs: { tokens: ids.map((i) => `token_id:${i}`), token_logprobs: [-0.1, -0.2, -0.3] } },
      ],
    },
  });
  const row = { id: "r", prompt: [{ role: "user" as const, content: "37+45" }], answer: "82", info: {} };
  const r = await singleTurnRollout({ model: client, sampling }, row);
  const req = requests.at(-1)!;
  assert.equal(req.url, "/v1/completions");
  assert.equal(req.auth, "Bearer k");
  assert.deepEqual(req.body["prompt"], tok.applyChatTemplate(row.prompt, { addGenerationPrompt: true }));
  assert.deepEqual([req.body["max_tokens"], req.body["temperature"], req.body["top_p"], req.body["top_k"], req.body["logprobs"]], [8, 0.7, 0.9, 20, 1]);
  assert.deepEqual(r.completionIds, ids);
  assert.deepEqual(r.samplerLogprobs, [-0.1, -0.2, -0.3]);
  assert.equal(r.messages.at(-1)!.content, "82");
  assert.equal(r.stopReason, "eos");
  assert.equal(r.policyVersionMax, 2);
});

test("plain-text servers, stop strings, length, and errors", async () => {
  const client = new OpenAICompletionsClient({ baseUrl: base, model: "m", tokenizer: tok });
  replies.push({ body: { choices: [{ text: "12", finish_reason: "length", logprobs: { tokens: ["1", "2"], token_logprobs: [-1, null] } }] } });
  const g = await client.generate([1, 2], sampling);
  assert.deepEqual([g.tokenIds, g.logprobs, g.text, g.stopReason], [tok.encode("12"), [-1, 0], "12", "length"]);
  assert.equal(requests.at(-1)!.url, "/v1/completions");

  replies.push({
    body: {
      choices: [
        {
          text: "7",
          finish_reason: "stop",
          stop_reason: "\n\n",
          logprobs: { tokens: ["token_id:55", "token_id:10", "token_id:10"], token_logprobs: [-1, -2, -3] },
        },
      ],
    },
  });
  const s = await client.generate([1], { ...sampling, stop: ["\n\n"] });
  assert.deepEqual([s.text, s.stopReason, s.tokenIds.length], ["7", "stop", 3]);

  replies.push({ status: 400, body: { error: "prompt too long" } });
  await assert.rejects(client.generate([1], sampling), /answered 400: .*prompt too long/);
  replies.push({ body: "not json" });
  await assert.rejects(client.generate([1], sampling), /invalid JSON/);
  replies.push({ body: { choices: [] } });
  await assert.rejects(client.generate([1], sampling), /no choices/);
  assert.throws(() => new OpenAICompletionsClient({ baseUrl: "", model: "m", tokenizer: tok }), /baseUrl is required/);
});
