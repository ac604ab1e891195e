import { test } from "node:test";
import assert from "node:assert/strict";
import { loadEnvironment } from "../../environments/tool/index.js";
import { formatToolCall, type RolloutResult } from "../../environments/api/index.js";
import { ByteChatTokenizer, ScriptedModelClient } from "../../environments/testing/index.js";
import { checkTokens } from "./rollout-check.js";

const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 300 };

/**
 * A scripted policy that really uses the tools: it reads the question and the tool results from its
 * context, looks up every city it needs, computes with the calculator, then answers.
 */
function toolUsingPolicy(context: string): string {
  const q = /<\|im_start\|>user\n(.*?)<\|im_end\|>/.exec(context)![1]!;
  const cities = [...q.matchAll(/\b([A-Z][a-z]{3,})\b/g)].map((m) => m[1]!).filter((c) => !["What", "How", "Look", "If"].includes(c));
  const results = [...context.matchAll(/<\|im_start\|>tool\n(.*?)<\|im_end\|>/g)].map((m) => m[1]!);
  if (results.length < cities.length) return `I need data. ${formatToolCall("lookup", { city: cities[results.length]! })}`;
  const [a, b] = results.slice(0, cities.length).map(Number);
  if (results.length === cities.length) {
    const k = /grew (\d)-fold/.exec(q)?.[1];
    const expr = k ? `${a}*${k}` : q.startsWith("How many more") ? `${a}-${b}` : `${a}+${b}`;
    return formatToolCall("calculator", { expression: expr });
  }
  return `<answer>${results[results.length - 1]}</answer>`;
}

test("tool env end to end: a policy that looks up and calculates is correct; guessing is not", async () => {
  const env = await loadEnvironment({ seed: 3 });
  assert.equal(`${env.name}@${env.version}`, "tool@1.0.0");
  const tok = new ByteChatTokenizer();
  for (let i = 0; i < 6; i++) {
    const row = env.dataset("eval").row(i);
    const model = new ScriptedModelClient(tok, toolUsingPolicy);
    const good = await env.rollout({ model, sampling }, row);
    checkTokens(good, model);
    const guess = await env.rollout({ model: new ScriptedModelClient(tok, ["<answer>12345</answer>"]), sampling }, row);
    const [sg, sb] = await env.scoreGroup([good, guess], row, {});
    assert.equal(sg!.reward, 1, `${row.prompt[0]!.content} -> ${good.messages.at(-1)!.content}: ${JSON.stringify(sg)}`);
    assert.equal(sg!.metrics["looked_up"], 1);
    assert.equal(sg!.metrics["format"], 1);
    assert.equal(sg!.metrics["tool_calls.calculator"], 1);
    assert.equal(sg!.metrics["tool_calls.lookup"], (row.info["needed"] as string[]).length);
    assert.equal(good.stopReason, "completed");
    assert.equal(sb!.reward, 0);
    assert.equal(sb!.metrics["looked_up"], 0);
    assert.equal(sb!.metrics["tool_calls"], 0);
  }
});

test("tool env: unknown cities and bad expressions come back as errors; max turns stops a looping policy", async () => {
  const env = await loadEnvironment({ maxTurns: 3 });
  const row = env.dataset("train").row(0);
  const tok = new ByteChatTokenizer();
  const model = new ScriptedModelClient(tok, [
    formatToolCall("lookup", { city: "Atlantis" }),
    formatToolCall("calculator", { expression: "1/0" }),
    formatToolCall("calculator", { expression: "2+2" }),
  ]);
  const r: RolloutResult = await env.rollout({ model, sampling }, row);
  assert.deepEqual(
    r.messages.filter((m) => m.role === "tool").map((m) => m.content),
    ['error: unknown city "Atlantis"', "error: division by zero"],
  );
  assert.equal(r.stopReason, "max_turns");
  const [s] = await env.scoreGroup([r], row, {});
  assert.equal(s!.reward, 0);
  assert.equal(s!.metrics["tool_errors"], 2);
});
