// SFT then RL with a Hugging Face tokenizer folder instead of the byte tokenizer: every actor loads it
// from the run config, prompts come from its chat template, and the turn ends at its EOS.
import { test } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { writeTokenizerDir } from "../helpers/hf-tokenizer-dir.js";
import { StateKeys } from "../../streams/index.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { HfTokenizer } from "../../kernels/hf-tokenizer.js";

test("a run with tokenizer kind hf trains end to end on the tokenizer's chat format", async () => {
  const { dir, ids } = writeTokenizerDir();
  const run = await startRun("hftok", {
    tokenizer: { kind: "hf", path: dir },
    // A fresh model must match the tokenizer exactly (268 ids), else it could sample ids nobody can decode.
    model: { vocabSize: 268, hiddenSize: 32, intermediateSize: 64, numLayers: 1, numHeads: 2, numKvHeads: 1, maxPositionEmbeddings: 96, threads: 1, seed: 5 },
    sft: { steps: 3, batchSize: 8 },
    rl: { steps: 2, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 120_000, `${run.dir}/logs`);
    const tok = HfTokenizer.fromDir(dir);
    const { jsm, names } = run.topology;
    let rows = 0;
    for (const m of await storedMessages(jsm, names.streams.rollouts, names.subjects.rolloutsScored)) {
      for (const r of decodeRolloutBatch(m.data).rows) {
        rows++;
        const prompt = tok.decode(r.promptIds);
        assert.match(prompt, /^<\|im_start\|>(system|user)\n/, "the prompt is the tokenizer's chat template");
        assert.ok(prompt.endsWith("<|im_start|>assistant\n"), JSON.stringify(prompt));
        assert.ok(r.promptIds.every((id) => id < tok.vocabSize) && r.completionIds.every((id) => id < tok.vocabSize));
        const stopIdx = [...r.completionIds].findIndex((id) => tok.stopTokenIds().includes(id));
        if (r.stopReason === "stop") assert.equal(stopIdx, r.completionIds.length - 1, `a stopped completion ends at an EOS id (${[...r.completionIds]})`);
      }
    }
    assert.equal(rows, 16, "2 steps x 8 samples scored");
    assert.ok(ids["<|im_end|>"]! > 255);
  } finally {
    await run.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
