// Each model turn's text must be what its sampled ids decode to. Real rollouts (single-turn, the tool env's
// multi-turn transcripts, a stop string cut, a Qwen-style HF tokenizer, the engine's own sampling) pass; a text
// that says other than its ids, an extra or missing assistant message, or trained ids outside every turn fail.
import { test } from "node:test";
import assert from "node:assert/strict";
import { checkTurnText, modelTurnSpans, turnTextMatches } from "../../streams/turn-text.js";
import { isPoison } from "../../streams/dead-letter.js";
import { rejectReasonOf } from "../../streams/rollout-limits.js";
import { toRawRollout, type RawRollout } from "../../streams/index.js";
import { loadTokenizer, type Tokenizer } from "../../kernels/tokenizer.js";
import { PolicyModel } from "../../kernels/index.js";
import { PolicyEngine } from "../../actors/runtime/policy-engine.js";
import { completionMessages, singleTurnRollout, type DatasetRow, type RolloutResult } from "../../environments/api/index.js";
import { ScriptedModelClient } from "../../environments/testing/scripted-model.js";
import { resolveEnvironment } from "../../environments/registry.js";
import { writeTokenizerDir } from "../helpers/hf-tokenizer-dir.js";
import { validRollout } from "../helpers/rollout-fixtures.js";

const byte = loadTokenizer({ kind: "byte" });
const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 200 };
const row: DatasetRow = { id: "r", prompt: [{ role: "user", content: "1+2" }], answer: "3", info: {} };

function check(r: RawRollout | RolloutResult, tok: Tokenizer = byte, stop: string[] = [], at: DatasetRow = row): void {
  checkTurnText(toRawRollout(r as RolloutResult), completionMessages(r as RolloutResult, at), tok, stop, "rollout 2 of task t");
}

function refused(fn: () => void, reason: RegExp): void {
  assert.throws(fn, (e: Error) => {
    assert.ok(isPoison(e));
    assert.equal(rejectReasonOf(e.message), "text");
    assert.match(e.message, reason);
    return true;
  });
}

test("the fixture rollout passes; the same ids with a text that gives another answer are refused with where they part", () => {
  check(validRollout());
  refused(
    () => check(validRollout({ messages: [row.prompt[0]!, { role: "assistant", content: "4" }] })),
    /^text: rollout 2 of task t turn 0 text does not decode from its ids \(at character 0: text "4" vs ids "3"\)$/,
  );
  // Ids that say a wrong answer under a text with the right one: the case that trained at a positive advantage.
  refused(() => check(validRollout({ completionIds: [52, 263] })), /text "3" vs ids "4"/);
});

test("turn count and coverage: one assistant message per model turn, and no trained id outside a turn", () => {
  const extra = validRollout({ messages: [row.prompt[0]!, { role: "assistant", content: "3" }, { role: "assistant", content: "3" }] });
  refused(() => check(extra), /has 1 model turns in its ids but 2 assistant messages after the prompt/);
  refused(() => check(validRollout({ messages: [row.prompt[0]!] })), /1 model turns in its ids but 0 assistant messages/);
  // turnOffsets point past the sampled tokens: the trained ids escape every turn.
  refused(
    () => check(validRollout({ completionIds: [51, 263, 50], completionMask: [1, 0, 1], samplerLogprobs: [-1, 0, -1] })),
    /model-sampled ids \(mask 1\) outside every model turn/,
  );
  // Groups recorded before turnOffsets existed: each run of mask-1 tokens is a turn.
  check(validRollout({ turnOffsets: [] }));
  assert.deepEqual(modelTurnSpans({ completionIds: [1, 2, 3, 4, 5], completionMask: [1, 1, 0, 1, 0], turnOffsets: [] }), [
    [0, 2],
    [3, 4],
  ]);
  assert.deepEqual(modelTurnSpans({ completionIds: [1, 2, 3, 4, 5], completionMask: [1, 1, 0, 1, 0], turnOffsets: [0, 3] }), [
    [0, 2],
    [3, 4],
  ]);
  // A few-shot assistant message in the prompt is not a model turn.
  const fewShot: DatasetRow = { ...row, prompt: [{ role: "user", content: "2+2" }, { role: "assistant", content: "4" }, row.prompt[0]!] };
  check(validRollout({ messages: [...fewShot.prompt, { role: "assistant", content: "3" }] }), byte, [], fewShot);
});

test("a text cut before a stop string of the task passes; cut anywhere else, or at a string the task does not name, it is refused", async () => {
  const model = new ScriptedModelClient(byte, ["The answer is 3</answer> and more"]);
  const r = await singleTurnRollout({ model, sampling: { ...sampling, stop: ["</answer>"] } }, row);
  assert.equal(r.messages[1]!.content, "The answer is 3", "the scripted model cut the text before the stop string, its tokens kept");
  check(r, byte, ["</answer>"]);
  refused(() => check(r, byte, []), /at character 15: text "… answer is 3" vs ids "… answer is 3<\/answer>"/);
  assert.ok(!turnTextMatches("The answer is", "The answer is 3</answer>", ["</answer>"]), "a cut elsewhere is no stop-string cut");
});

test("the tool env's multi-turn rollouts pass, with the run's byte tokenizer and with a Qwen-style HF tokenizer", async () => {
  const env = await resolveEnvironment("tool@^1", {});
  const r3 = env.dataset("train").row(3);
  const needed = r3.info["needed"] as string[];
  const replies = [...needed.map((c) => `<tool>{"name": "lookup", "args": {"city": "${c}"}}</tool>`), `<answer>${r3.answer}</answer>`];
  const hf = loadTokenizer({ kind: "hf", path: writeTokenizerDir().dir });
  for (const tok of [byte, hf]) {
    const r = await env.rollout({ model: new ScriptedModelClient(tok, replies), sampling }, r3);
    assert.equal(r.turnOffsets.length, needed.length + 1, "one turn per tool call and the answer");
    assert.ok(r.completionMask.includes(0), "env tokens between the turns");
    check(r, tok, [], r3);
    // Positive control: one turn's text changed in the transcript is caught at that turn.
    const k = r.messages.findIndex((m, i) => i >= (r.state["promptLength"] as number) && m.role === "assistant");
    const forged = { ...r, messages: r.messages.map((m, i) => (i === k ? { ...m, content: m.content.replace("lookup", "lookuq") } : m)) };
    refused(() => check(forged, tok, [], r3), /turn 0 text does not decode from its ids/);
  }
});

test("what the engine samples (junk ids, special tokens mid-turn) passes: its text is the same decoding", async () => {
  const model = PolicyModel.create(
    {
      vocabSize: 288,
      hiddenSize: 32,
      intermediateSize: 64,
      numLayers: 1,
      numHeads: 2,
      numKvHeads: 1,
      rmsNormEps: 1e-5,
      ropeTheta: 10000,
      tieWordEmbeddings: true,
      maxPositionEmbeddings: 64,
      attentionBias: false,
    },
    { seed: 3, threads: 1, device: "cpu" },
  );
  const engine = new PolicyEngine(model, byte, 0, { seed: 9 });
  const client = engine.client(1);
  const rollouts = await Promise.all(
    Array.from({ length: 8 }, () => singleTurnRollout({ model: client, sampling: { ...sampling, maxTokens: 24, temperature: 2 } }, row)),
  );
  const ids = rollouts.flatMap((r) => r.completionIds);
  assert.ok(
    ids.some((id) => id >= 256 && !byte.stopTokenIds().includes(id)),
    "a random model samples special ids inside a turn (the control that decode drops them on both sides)",
  );
  for (const r of rollouts) check(r);
  model.dispose();
});
