// Fine-tuning a Hugging Face-format checkpoint as a user would: a folder with config.json (Qwen2),
// model.safetensors and the tokenizer files, named by `model.path` alone. The embedding is padded past the
// tokenizer's vocabulary (as Qwen's is): inference must never draw the padded ids.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { cliMain, startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { writeTokenizerDir } from "../helpers/hf-tokenizer-dir.js";
import { RunChannels, StateKeys } from "../../streams/index.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { PolicyModel } from "../../kernels/index.js";
import { toHfConfig } from "../../kernels/hf-config.js";
import type { ModelConfig } from "../../kernels/model-config.js";
import { HfTokenizer } from "../../kernels/hf-tokenizer.js";
import { makeCheckpointClient } from "../../cli/checkpoint-client.js";

/** An HF checkpoint folder: the test tokenizer (268 ids), a Qwen2 config.json and model.safetensors. */
function writeCheckpointDir(): { dir: string; cfg: ModelConfig; params: Float32Array } {
  const { dir } = writeTokenizerDir(); // 268 ids
  const cfg: ModelConfig = {
    vocabSize: 288, // padded past the tokenizer
    hiddenSize: 32,
    intermediateSize: 64,
    numLayers: 1,
    numHeads: 2,
    numKvHeads: 1,
    rmsNormEps: 1e-6,
    ropeTheta: 1_000_000,
    tieWordEmbeddings: true,
    maxPositionEmbeddings: 96,
    attentionBias: true,
  };
  const original = PolicyModel.create(cfg, { seed: 9, threads: 1 });
  const params = original.getParams();
  for (let i = 0; i < params.length; i++) params[i]! *= 3; // a checkpoint that is not our own init
  original.setParams(params);
  writeFileSync(join(dir, "config.json"), JSON.stringify(toHfConfig(cfg, "qwen2")));
  writeFileSync(join(dir, "model.safetensors"), original.toSafetensors());
  original.dispose();
  return { dir, cfg, params };
}

test("a run started from an HF checkpoint folder loads its weights and tokenizer and trains on them", async () => {
  const { dir, cfg, params } = writeCheckpointDir();
  const run = await startRun("hfckpt", {
    model: { path: dir, threads: 1 },
    tokenizer: { kind: "hf" }, // its path defaults to model.path
    rl: { steps: 2, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 2, topP: 1, topK: 0, maxTokens: 8 } },
    // Every version stays in the store (v0 is read below; no evaluator runs to hold it).
    checkpoint: { interval: 2, keepLast: 2, keepVersions: 3 },
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 120_000, `${run.dir}/logs`);

    // v0, the policy RL started from (no SFT stage), is the checkpoint's weights exactly.
    const v0 = PolicyModel.create(cfg, { seed: 1, threads: 1 });
    v0.loadSafetensors(await new RunChannels(run.topology.wire).weights.fetch(0));
    assert.deepEqual(v0.getParams(), params);
    v0.dispose();

    const { jsm, names } = run.topology;
    let tokens = 0;
    for (const m of await storedMessages(jsm, names.streams.rollouts, names.subjects.rolloutsScored)) {
      for (const r of decodeRolloutBatch(m.data).rows) {
        tokens += r.completionIds.length;
        assert.ok(
          [...r.completionIds].every((id) => id < 268),
          `a padded id was sampled: ${[...r.completionIds]}`,
        );
      }
    }
    assert.ok(tokens >= 16, `${tokens} completion tokens checked`);
    assert.equal(await run.state.learnerStep(), 2);
  } finally {
    await run.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("rollstream eval --checkpoint on an HF folder uses the folder's tokenizer and never emits a padded id", async () => {
  const { dir } = writeCheckpointDir();
  try {
    const client = await makeCheckpointClient(dir, { threads: 1, seed: 3 });
    assert.equal(client.tokenizer.vocabSize, 268);
    const prompt = HfTokenizer.fromDir(dir).applyChatTemplate([{ role: "user", content: "hello world" }], { addGenerationPrompt: true });
    const gens = await Promise.all(Array.from({ length: 8 }, () => client.generate(prompt, { temperature: 2, topP: 1, topK: 0, maxTokens: 16 })));
    assert.ok(gens.every((g) => g.tokenIds.every((id) => id < 268)));
    const out = join(dir, "eval-out");
    const r = spawnSync(
      process.execPath,
      [cliMain, "eval", "arithmetic", "--checkpoint", dir, "-n", "3", "-r", "2", "--max-tokens", "8", "--threads", "1", "-o", out],
      { encoding: "utf8", timeout: 60_000 },
    );
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /pass@1/);
    const rows = readFileSync(join(out, "results.jsonl"), "utf8").trim().split("\n");
    assert.equal(rows.length, 6);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
