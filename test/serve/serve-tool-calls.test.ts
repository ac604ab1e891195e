// Tool calls in /v1/chat/completions answers, parsed from the Hermes <tool_call> JSON the Qwen3 template teaches
// (as vLLM's hermes tool parser does), read back by the `openai` npm client, streaming and not. The route runs over
// a scripted token engine that "samples" a fixed reply, so the reply is exactly what the test needs; positive
// controls: the same reply without tools in the request, and one whose call is not JSON, stay plain content.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import Fastify, { type FastifyInstance } from "fastify";
import OpenAI from "openai";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { registerChatRoute } from "../../serve/chat-route.js";
import { installErrorHandler } from "../../serve/http-errors.js";
import type { TokenEngine, TokenRequest, TokenResult } from "../../serve/token-engine.js";

const tok = new ByteTokenizer();
let reply = "";
/** Samples `reply` (then EOS), one token at a time. */
const engine: TokenEngine = {
  limits: { vocabSize: tok.vocabSize, contextTokens: 4096 },
  async generate(req: TokenRequest): Promise<TokenResult> {
    const ids = [...tok.encode(reply), tok.eosId].slice(0, req.maxTokens);
    for (const t of ids) req.onToken?.({ tokenId: t, logprob: -0.5, version: "0" });
    return { tokenIds: ids, logprobs: ids.map(() => -0.5), versions: ids.map(() => "0"), finish: ids.at(-1) === tok.eosId ? "stop" : "length" };
  },
};

let app: FastifyInstance;
let client: OpenAI;
before(async () => {
  app = Fastify();
  installErrorHandler(app, () => undefined);
  registerChatRoute(app, { engine, tokenizer: tok, modelName: "tiny" });
  await app.listen({ host: "127.0.0.1", port: 0 });
  client = new OpenAI({ baseURL: `http://127.0.0.1:${(app.server.address() as { port: number }).port}/v1`, apiKey: "none", maxRetries: 0 });
});
after(() => app.close());

const tools = [
  { type: "function" as const, function: { name: "lookup", description: "weather", parameters: { type: "object", properties: { city: { type: "string" } } } } },
];
const messages = [{ role: "user" as const, content: "Weather in Paris and Oslo?" }];
const CALLS =
  'Let me check.<tool_call>\n{"name": "lookup", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "lookup", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>';

test("tool calls: each <tool_call> block is message.tool_calls[i], content the text before, finish_reason tool_calls", async () => {
  reply = CALLS;
  const r = await client.chat.completions.create({ model: "tiny", messages, tools, max_tokens: 400 });
  const m = r.choices[0]!.message;
  assert.equal(m.content, "Let me check.");
  assert.equal(r.choices[0]!.finish_reason, "tool_calls");
  assert.equal(m.tool_calls?.length, 2);
  const [a, b] = m.tool_calls! as { id: string; type: string; function: { name: string; arguments: string } }[];
  assert.equal(a!.type, "function");
  assert.match(a!.id, /^chatcmpl-tool-[0-9a-f]{32}$/);
  assert.notEqual(a!.id, b!.id);
  assert.deepEqual([a!.function.name, a!.function.arguments], ["lookup", '{"city": "Paris"}']);
  assert.deepEqual(JSON.parse(b!.function.arguments), { city: "Oslo", days: 2 });
  // A reply that is only a call has null content.
  reply = CALLS.slice("Let me check.".length);
  const only = await client.chat.completions.create({ model: "tiny", messages, tools, max_tokens: 400 });
  assert.equal(only.choices[0]!.message.content, null);
  assert.equal(only.choices[0]!.message.tool_calls?.length, 2);
});

test("positive controls: without tools, with tool_choice none, or with a call that is not JSON, the reply is plain content", async () => {
  reply = CALLS;
  const plain = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 400 });
  assert.equal(plain.choices[0]!.message.content, CALLS);
  assert.deepEqual(plain.choices[0]!.message.tool_calls, []);
  assert.equal(plain.choices[0]!.finish_reason, "stop");
  const none = await client.chat.completions.create({ model: "tiny", messages, tools, tool_choice: "none", max_tokens: 400 });
  assert.equal(none.choices[0]!.message.content, CALLS);
  reply = "Sure.<tool_call>\n{not json}\n</tool_call>";
  const bad = await client.chat.completions.create({ model: "tiny", messages, tools, max_tokens: 400 });
  assert.equal(bad.choices[0]!.message.content, reply);
  assert.deepEqual(bad.choices[0]!.message.tool_calls, []);
});

test("streamed: content up to the first call, never the tag; then the calls in a delta and finish_reason tool_calls", async () => {
  reply = CALLS;
  const stream = await client.chat.completions.create({ model: "tiny", messages, tools, max_tokens: 400, stream: true });
  let content = "";
  const calls: { index: number; id?: string; function?: { name?: string; arguments?: string } }[] = [];
  let finish: string | null = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta.content ?? "";
    for (const t of c.delta.tool_calls ?? []) calls.push(t);
    finish = c.finish_reason ?? finish;
  }
  assert.equal(content, "Let me check.");
  assert.equal(finish, "tool_calls");
  assert.deepEqual(
    calls.map((c) => [c.index, c.function?.name, c.function?.arguments]),
    [
      [0, "lookup", '{"city": "Paris"}'],
      [1, "lookup", '{"city": "Oslo", "days": 2}'],
    ],
  );
  // Positive control: the same stream without tools shows the whole reply.
  let whole = "";
  for await (const chunk of await client.chat.completions.create({ model: "tiny", messages, max_tokens: 400, stream: true }))
    whole += chunk.choices[0]?.delta.content ?? "";
  assert.equal(whole, CALLS);
});
