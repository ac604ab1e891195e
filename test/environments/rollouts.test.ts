import { test } from "node:test";
import assert from "node:assert/strict";
import { multiTurnRollout, singleTurnRollout, TokenTranscript, type DatasetRow, type SamplingArgs, type TokenizerLike } from "../../environments/api/index.js";
import { ByteChatTokenizer, ScriptedModelClient } from "../../environments/testing/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { checkTokens } from "./rollout-check.js";

const sampling: SamplingArgs = { temperature: 1, topP: 1, topK: 0, maxTokens: 64 };
const row: DatasetRow = { id: "g0", prompt: [{ role: "user", content: "Guess my number (1-10)." }], answer: "7", info: {} };
const tokenizers: Array<[string, TokenizerLike]> = [
  ["ChatML byte tokenizer", new ByteChatTokenizer()],
  ["kernels ByteTokenizer", new ByteTokenizer()],
];

test("single turn: prompt is the templated row prompt; completion is the reply and its stop token, all mask 1", async () => {
  const tok = new ByteChatTokenizer();
  const model = new ScriptedModelClient(tok, ["7"], { policyVersion: 3 });
  const r = await singleTurnRollout({ model, sampling }, row);
  assert.deepEqual(r.promptIds, tok.applyChatTemplate(row.prompt, { addGenerationPrompt: true }));
  assert.deepEqual(r.completionIds, [...tok.encode("7"), ByteChatTokenizer.IM_END]);
  assert.deepEqual(r.completionMask, [1, 1]);
  assert.equal(r.stopReason, "eos");
  assert.equal(r.isTruncated, false);
  assert.equal(r.numTurns, 1);
  assert.deepEqual([r.policyVersionMin, r.policyVersionMax], [3, 3]);
  assert.deepEqual(r.messages.at(-1), { role: "assistant", content: "7" });
  checkTokens(r, model);
});

test("single turn: maxTokens truncates (length) and stop strings cut the text but keep sampled tokens", async () => {
  const tok = new ByteChatTokenizer();
  const cut = await singleTurnRollout({ model: new ScriptedModelClient(tok, ["123456"]), sampling: { ...sampling, maxTokens: 3 } }, row);
  assert.equal(cut.stopReason, "length");
  assert.equal(cut.isTruncated, true);
  assert.equal(cut.completionIds.length, 3);
  assert.equal(cut.messages.at(-1)!.content, "123");
  const stopped = await singleTurnRollout({ model: new ScriptedModelClient(tok, ["7\nUser: more"]), sampling: { ...sampling, stop: ["\nUser:"] } }, row);
  assert.equal(stopped.stopReason, "stop");
  assert.equal(stopped.messages.at(-1)!.content, "7");
  assert.equal(tok.decode(stopped.completionIds), "7\nUser:");
});

for (const [label, tok] of tokenizers) {
  test(`multi-turn (${label}): one token sequence, model tokens mask 1, env turns rendered by the template`, async () => {
    const model = new ScriptedModelClient(tok, ["5", "8", "7"], { policyVersion: 1 });
    const r = await multiTurnRollout({ model, sampling }, row, {
      maxTurns: 5,
      setupState: () => ({ guesses: 0 }),
      isCompleted: (messages, _state, rw) => messages.at(-1)!.content.trim() === rw.answer,
      envResponse: (messages, state) => {
        state["guesses"] = (state["guesses"] as number) + 1;
        return [{ role: "user", content: Number(messages.at(-1)!.content) < 7 ? "higher" : "lower" }];
      },
    });
    assert.equal(r.stopReason, "completed");
    assert.equal(r.numTurns, 3);
    assert.equal(r.state["guesses"], 2);
    assert.deepEqual(
      r.messages.slice(1).map((m) => `${m.role}:${m.content}`),
      ["assistant:5", "user:higher", "assistant:8", "user:lower", "assistant:7"],
    );
    checkTokens(r, model);
    // The whole sequence is the template rendering of the transcript (the model ended turns on its stop token).
    const rendered = tok.applyChatTemplate(r.messages, { addGenerationPrompt: false });
    assert.deepEqual([...r.promptIds, ...r.completionIds], rendered.slice(0, r.promptIds.length + r.completionIds.length));
    assert.equal(
      tok.decode(
        r.completionIds.filter((_, i) => r.completionMask[i] === 1),
        { skipSpecial: true },
      ),
      "587",
    );
  });
}

test("multi-turn: a turn that ended without a stop token is closed by template tokens (mask 0)", async () => {
  const tok = new ByteChatTokenizer();
  const model = new ScriptedModelClient(tok, ["abc", "7"], { endWithStopToken: false });
  const r = await multiTurnRollout({ model, sampling }, row, {
    isCompleted: (m) => m.at(-1)!.content === "7",
    envResponse: () => [{ role: "user", content: "no" }],
  });
  checkTokens(r, model);
  const firstEnv = r.completionIds.slice(3, r.completionMask.indexOf(1, 3));
  assert.equal(tok.decode(firstEnv), "<|im_end|>\n<|im_start|>user\nno<|im_end|>\n<|im_start|>assistant\n");
});

test("multi-turn stop conditions: max_turns, env_done (final message not tokenized), token_budget, timeout, env_error", async () => {
  const tok = new ByteChatTokenizer();
  const echo = () => [{ role: "user" as const, content: "again" }];

  const maxTurns = await multiTurnRollout({ model: new ScriptedModelClient(tok, () => "x"), sampling }, row, { maxTurns: 3, envResponse: echo });
  assert.deepEqual([maxTurns.stopReason, maxTurns.numTurns, maxTurns.isTruncated], ["max_turns", 3, false]);

  const doneModel = new ScriptedModelClient(tok, ["6", "7"]);
  const done = await multiTurnRollout({ model: doneModel, sampling }, row, {
    envResponse: (m) => (m.at(-1)!.content === "7" ? { messages: [{ role: "user", content: "correct!" }], done: true } : echo()),
  });
  assert.equal(done.stopReason, "env_done");
  assert.equal(done.messages.at(-1)!.content, "correct!");
  assert.ok(!tok.decode(done.completionIds).includes("correct!"), "the final verdict is not in the tokens");
  checkTokens(done, doneModel);

  const budgetModel = new ScriptedModelClient(tok, () => "0123456789");
  const budget = await multiTurnRollout({ model: budgetModel, sampling }, row, { maxCompletionTokens: 40, envResponse: echo });
  assert.equal(budget.stopReason, "token_budget");
  assert.equal(budget.isTruncated, true);
  assert.ok(budget.completionIds.length <= 40, `completion ${budget.completionIds.length} within budget`);
  assert.ok(budgetModel.calls.every((c) => c.args.maxTokens <= 40));
  checkTokens(budget, budgetModel);

  const t0 = Date.now();
  const slow = await multiTurnRollout({ model: new ScriptedModelClient(tok, () => "x", { delayMs: 40 }), sampling }, row, {
    timeoutMs: 100,
    maxTurns: 50,
    envResponse: echo,
  });
  assert.equal(slow.stopReason, "timeout");
  assert.equal(slow.isTruncated, true);
  assert.ok(slow.numTurns >= 1 && slow.numTurns < 5);
  assert.ok(Date.now() - t0 < 1000);

  const broken = await multiTurnRollout({ model: new ScriptedModelClient(tok, () => "x"), sampling }, row, {
    envResponse: () => {
      throw new Error("env exploded");
    },
  });
  assert.equal(broken.stopReason, "env_error");
  assert.deepEqual(broken.state["errors"], ["envResponse: env exploded"]);
});

test("multi-turn: the runtime's abort rejects the rollout; bad options are rejected", async () => {
  const tok = new ByteChatTokenizer();
  const ac = new AbortController();
  const p = multiTurnRollout({ model: new ScriptedModelClient(tok, () => "x", { delayMs: 1000 }), sampling, signal: ac.signal }, row, {
    envResponse: () => [],
  });
  setTimeout(() => ac.abort(new Error("shutting down")), 20);
  await assert.rejects(p, /shutting down/);
  await assert.rejects(
    multiTurnRollout({ model: new ScriptedModelClient(tok, []), sampling }, row, { maxTurns: 0, envResponse: () => [] }),
    /maxTurns must be an integer >= 1/,
  );
});

test("a template that is not prefix-stable is a clear error, not a wrong token sequence", async () => {
  const base = new ByteChatTokenizer();
  // Renders the message count first: adding a message changes every earlier token.
  const unstable: TokenizerLike = {
    vocabSize: base.vocabSize,
    eosId: base.eosId,
    encode: (t) => base.encode(t),
    decode: (i, o) => base.decode(i, o),
    stopTokenIds: () => base.stopTokenIds(),
    applyChatTemplate: (m, o) => [...base.encode(String(m.length)), ...base.applyChatTemplate(m, o)],
  };
  await assert.rejects(
    multiTurnRollout({ model: new ScriptedModelClient(unstable, ["a", "b"]), sampling }, row, { envResponse: () => [{ role: "user", content: "hi" }] }),
    /not prefix-stable/,
  );
});

test("per-token versions: spans of each model turn land at its completion offset; env tokens are in none", () => {
  const tok = new ByteChatTokenizer();
  const t = new TokenTranscript(tok, [{ role: "user", content: "go" }]);
  const stop = tok.stopTokenIds()[0] ?? tok.eosId;
  // Turn 1: weights changed after its second token (v3 -> v4). Turn 2: all v4, no spans given.
  const ids1 = [...tok.encode("abc"), stop];
  t.addModelTurn({
    tokenIds: ids1,
    logprobs: ids1.map(() => -1),
    text: "abc",
    stopReason: "eos",
    policyVersion: 3,
    versionSpans: [
      { version: 3, start: 0, end: 2 },
      { version: 4, start: 2, end: ids1.length },
    ],
  });
  const bridge = t.addEnvMessages([{ role: "user", content: "more" }]);
  const ids2 = [...tok.encode("de"), stop];
  t.addModelTurn({ tokenIds: ids2, logprobs: ids2.map(() => -1), text: "de", stopReason: "eos", policyVersion: 4 });
  const r = t.toResult({ stopReason: "completed", isTruncated: false, state: {}, timings: { generateMs: 0, envMs: 0 } });
  const second = ids1.length + bridge;
  assert.deepEqual(r.versionSpans, [
    { version: 3, start: 0, end: 2 },
    { version: 4, start: 2, end: ids1.length },
    { version: 4, start: second, end: second + ids2.length },
  ]);
  assert.deepEqual([r.policyVersionMin, r.policyVersionMax], [3, 4]);
  // The spans cover exactly the sampled tokens (mask 1).
  const covered = r.completionIds.map((_, i) => (r.versionSpans!.some((s) => s.start <= i && i < s.end) ? 1 : 0));
  assert.deepEqual(covered, r.completionMask);
});
