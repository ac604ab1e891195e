// The whole loop, every actor its own process against a real nats-server: SFT, RL steps, weights
// versions, checkpoints on disk, and a restarted learner that resumes from its checkpoint.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { RunChannels, StateKeys } from "../../streams/index.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";

test("SFT then RL runs end to end across actor processes and checkpoints to disk", async () => {
  const run = await startRun("loop", {
    sft: { steps: 4, batchSize: 8 },
    rl: { steps: 4, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 } },
    checkpoint: { interval: 2, keepLast: 2, keepVersions: 2 },
    // Room for logic's longer prompts (a rollout past the context is left out of training, not cut).
    model: { vocabSize: 288, hiddenSize: 32, intermediateSize: 64, numLayers: 1, numHeads: 2, numKvHeads: 1, maxPositionEmbeddings: 256, threads: 1, seed: 5 },
    // A mix: SFT uses the one with gold replies; RL tasks come from both by weight.
    environments: [
      { id: "arithmetic@^1", args: { digits: 1, ops: ["+"], seed: 3 }, weight: 1 },
      { id: "logic@1.x", args: { difficulty: 1 }, weight: 1 },
    ],
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("4 RL steps", async () => (await run.state.learnerStep()) >= 4, 120_000, `${run.dir}/logs`);
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 20_000, `${run.dir}/logs`);
    await waitUntil("final checkpoint", async () => ((await run.state.get(StateKeys.checkpointLatest)) ?? -1) === 4, 20_000, `${run.dir}/logs`);
    assert.equal(await run.state.policyVersion(), 4);
    const ckdir = join(run.dir, "loop", "checkpoints");
    const kept = readdirSync(ckdir)
      .filter((n) => n.startsWith("step-"))
      .sort();
    assert.deepEqual(kept, ["step-00000002", "step-00000004"], "keep-last-2 of steps 0, 2, 4");
    assert.ok(existsSync(join(ckdir, "step-00000004", "manifest.json")));
    // Object store keeps only the newest weight versions: no evaluator runs here, so none is held for it (v0 was).
    // Pruning follows each announcement on its own, so the last prune may still be under way after the checkpoint.
    const weights = new RunChannels(run.topology.wire).weights;
    await waitUntil("weights pruned to v3, v4", async () => JSON.stringify(await weights.storedVersions()) === "[3,4]", 10_000).catch(async (e: Error) => {
      throw new Error(`${e.message}: stored ${JSON.stringify(await weights.storedVersions())}`);
    });
    // Scored batches carry each environment's name@version and valid masks.
    const envs = new Set<string>();
    for (const m of await storedMessages(run.topology.jsm, run.topology.names.streams.rollouts, run.topology.names.subjects.rolloutsScored)) {
      const { rows } = decodeRolloutBatch(m.data);
      for (const r of rows) envs.add(r.env);
      assert.ok(rows.every((r) => r.completionMask.length === r.completionIds.length));
    }
    assert.deepEqual([...envs].sort(), ["arithmetic@1.0.0", "logic@1.0.0"]);
    // The resolved versions are recorded in the run's metadata.
    const recorded = await run.state.get(StateKeys.environments);
    assert.deepEqual(recorded!.map((e) => e.id).sort(), ["arithmetic@1.0.0", "logic@1.0.0"]);
  } finally {
    await run.close();
  }
});
