// An outside client against a real `rollstream serve` (the app started by startServe on an HF folder, listening
// on a port): the `openai` npm package calls /v1/completions and /v1/chat/completions, streaming and not, and gets
// exactly what the model gives those prompts alone; /v1/models, /health and /metrics answer; bad requests are 400s
// the client reports as BadRequestError.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { LOAD_GAUGES, loadOf } from "../../actors/inference/fleet/server-load.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { startServe, type RunningServer } from "../../serve/start.js";
import { alone, tinyModel, tok, writeHfFolder } from "../helpers/serve-fixture.js";

let server: RunningServer;
let client: OpenAI;
let dir: string;
const quiet = { info: () => undefined, error: () => undefined };

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "rs-serve-"));
  writeHfFolder(join(dir, "tiny"), 3);
  server = await startServe({ source: { kind: "folder", path: join(dir, "tiny") }, host: "127.0.0.1", port: 0, threads: 1, log: quiet });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

test("openai client: /v1/completions with a token-id prompt and a text prompt, return_token_ids and logprobs", async () => {
  const model = tinyModel(3);
  try {
    const prompt = tok.encode("12+30=");
    const res = await client.completions.create({
      model: "tiny",
      prompt,
      max_tokens: 8,
      temperature: 1,
      seed: 21,
      logprobs: 0,
      // vLLM's extensions, passed through the client as extra body fields.
      ...({ return_token_ids: true, return_tokens_as_token_ids: true } as object),
    });
    const ref = await alone(model, prompt, { maxTokens: 8, seed: 21 });
    const c = res.choices[0]! as (typeof res.choices)[0] & { token_ids: number[]; prompt_token_ids: number[] };
    assert.equal(res.object, "text_completion");
    assert.equal(res.model, "tiny");
    assert.deepEqual(c.token_ids, ref.tokenIds);
    assert.deepEqual(c.prompt_token_ids, prompt);
    assert.equal(c.text, tok.decode(ref.tokenIds, { skipSpecial: true }));
    assert.deepEqual(c.logprobs!.token_logprobs, ref.logprobs);
    assert.deepEqual(
      c.logprobs!.tokens,
      ref.tokenIds.map((t) => `token_id:${t}`),
    );
    assert.equal(c.finish_reason, ref.stopReason === "length" ? "length" : "stop");
    assert.deepEqual(res.usage, { prompt_tokens: prompt.length, completion_tokens: ref.tokenIds.length, total_tokens: prompt.length + ref.tokenIds.length });

    // A text prompt is the same as its encoding.
    const text = await client.completions.create({ model: "tiny", prompt: "12+30=", max_tokens: 8, seed: 21 });
    assert.equal(text.choices[0]!.text, c.text);
    // n choices, each its own seed.
    const two = await client.completions.create({ model: "tiny", prompt, max_tokens: 8, seed: 21, n: 2 });
    assert.equal(two.choices.length, 2);
    assert.equal(two.choices[0]!.text, c.text);
    assert.equal(two.choices[1]!.text, tok.decode((await alone(model, prompt, { maxTokens: 8, seed: 22 })).tokenIds, { skipSpecial: true }));
  } finally {
    model.dispose();
  }
});

test("openai client: streamed /v1/completions gives the same text and token ids", async () => {
  const prompt = tok.encode("7*6=");
  const full = await client.completions.create({ model: "tiny", prompt, max_tokens: 12, seed: 4, ...({ return_token_ids: true } as object) });
  const stream = await client.completions.create({ model: "tiny", prompt, max_tokens: 12, seed: 4, stream: true, ...({ return_token_ids: true } as object) });
  let text = "";
  const ids: number[] = [];
  let finish: string | null = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0]! as (typeof chunk.choices)[0] & { token_ids?: number[] };
    text += c.text;
    ids.push(...(c.token_ids ?? []));
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(text, full.choices[0]!.text);
  assert.deepEqual(ids, (full.choices[0] as unknown as { token_ids: number[] }).token_ids);
  assert.equal(finish, full.choices[0]!.finish_reason);
});

test("openai client: /v1/chat/completions renders the chat template (tools included), streaming and not", async () => {
  const model = tinyModel(3);
  try {
    const messages = [
      { role: "system" as const, content: "be brief" },
      { role: "user" as const, content: "hi" },
    ];
    const res = await client.chat.completions.create({
      model: "tiny",
      messages,
      max_tokens: 10,
      seed: 9,
      logprobs: true,
      ...({ return_token_ids: true } as object),
    });
    const prompt = tok.applyChatTemplate(messages, { addGenerationPrompt: true });
    const ref = await alone(model, prompt, { maxTokens: 10, seed: 9 });
    const c = res.choices[0]! as (typeof res.choices)[0] & { token_ids: number[] };
    assert.equal(res.object, "chat.completion");
    assert.equal(c.message.role, "assistant");
    assert.equal(c.message.content, tok.decode(ref.tokenIds, { skipSpecial: true }));
    assert.deepEqual(c.token_ids, ref.tokenIds);
    assert.deepEqual((res as unknown as { prompt_token_ids: number[] }).prompt_token_ids, prompt);
    assert.deepEqual(
      c.logprobs!.content!.map((x) => x.logprob),
      ref.logprobs,
    );
    assert.equal(res.usage!.prompt_tokens, prompt.length);

    // Tools reach the template: the prompt grows by their definitions (the byte format shows them as a system turn).
    const tools = [{ type: "function" as const, function: { name: "add", description: "adds", parameters: { type: "object", properties: {} } } }];
    const withTools = await client.chat.completions.create({ model: "tiny", messages, tools, max_tokens: 4, seed: 9 });
    const toolPrompt = tok.applyChatTemplate(messages, { addGenerationPrompt: true, tools });
    assert.ok(toolPrompt.length > prompt.length);
    assert.equal(withTools.usage!.prompt_tokens, toolPrompt.length);
    assert.deepEqual(withTools.choices[0]!.message.tool_calls, []);

    const stream = await client.chat.completions.create({
      model: "tiny",
      messages,
      max_tokens: 10,
      seed: 9,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let role: string | undefined;
    let usage: unknown;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      const ch = chunk.choices[0];
      if (!ch) continue;
      role ??= ch.delta.role;
      text += ch.delta.content ?? "";
    }
    assert.equal(role, "assistant");
    assert.equal(text, c.message.content);
    assert.deepEqual(usage, res.usage);
  } finally {
    model.dispose();
  }
});

test("openai client: bad requests are 400s with one line; models, health and metrics answer", async () => {
  await assert.rejects(
    client.completions.create({ model: "tiny", prompt: [1, 99999], max_tokens: 2 }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && /vocabulary/.test(e.message),
  );
  await assert.rejects(
    client.chat.completions.create({ model: "tiny", messages: [], max_tokens: 2 }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && /messages/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model: "tiny", prompt: "x", max_tokens: 2, presence_penalty: 0.5 }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && /presence_penalty/.test(e.message),
  );
  const models = await client.models.list();
  assert.deepEqual(
    models.data.map((m) => m.id),
    ["tiny"],
  );
  assert.equal((await fetch(`${server.url}/health`)).status, 200);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /rollstream_serve_requests_total\{route="\/v1\/completions",status="400"\} 2/);
  assert.match(metrics, /rollstream_serve_generated_tokens_total \d+/);
  // What the fleet's adaptive cap reads (actors/inference/fleet/server-load.ts).
  const load = loadOf(metrics, LOAD_GAUGES.rollstream);
  assert.ok(load && load.kvUsage !== null && load.kvUsage >= 0 && load.kvUsage <= 1, `rollstream serve's load gauges: ${JSON.stringify(load)}`);
  // Positive control after the errors: the server still serves.
  const ok = await client.completions.create({ model: "tiny", prompt: "x", max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});

test("stop strings: the text ends before the stop string, stop_reason names it, the stream never shows it", async () => {
  const model = tinyModel(3);
  try {
    const prompt = tok.encode("abc");
    // Greedy output; its characters 2..3 as the stop string (a string the model does produce).
    const free = await alone(model, prompt, { maxTokens: 20, seed: 0, temperature: 0 });
    const freeText = tok.decode(free.tokenIds, { skipSpecial: true });
    const stop = freeText.slice(2, 4);
    assert.equal(stop.length, 2, `a greedy text long enough: ${JSON.stringify(freeText)}`);
    const res = await client.completions.create({ model: "tiny", prompt, max_tokens: 20, temperature: 0, stop: [stop] });
    const c = res.choices[0]! as (typeof res.choices)[0] & { stop_reason: string | number | null };
    assert.equal(c.text, freeText.slice(0, freeText.indexOf(stop)));
    assert.equal(c.finish_reason, "stop");
    assert.equal(c.stop_reason, stop);
    const stream = await client.completions.create({ model: "tiny", prompt, max_tokens: 20, temperature: 0, stop: [stop], stream: true });
    const parts: string[] = [];
    for await (const chunk of stream) parts.push(chunk.choices[0]!.text);
    assert.equal(parts.join(""), c.text);
    assert.ok(!parts.join("").includes(stop));
  } finally {
    model.dispose();
  }
});
