// The whole loop, every actor its own process against a real nats-server: SFT, RL steps, weights
// versions, checkpoints on disk, and a restarted learner that resumes from its checkpoint.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { startRun, waitUntil } from "../helpers/run-fixture.js";
import { StateKeys } from "../../streams/subjects.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";

test("SFT then RL runs end to end across actor processes and checkpoints to disk", async () => {
  const run = await startRun("loop", {
    sft: { steps: 4, batchSize: 8 },
    rl: { steps: 4, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 } },
    checkpoint: { interval: 2, keepLast: 2, keepVersions: 2 },
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("4 RL steps", async () => (await run.state.learnerStep()) >= 4, 120_000, `${run.dir}/logs`);
    await waitUntil("run done", async () => (await run.state.getJson(StateKeys.runStatus)) === "done", 20_000, `${run.dir}/logs`);
    await waitUntil("final checkpoint", async () => (await run.state.getNumber(StateKeys.checkpointLatest, -1)) === 4, 20_000, `${run.dir}/logs`);
    assert.equal(await run.state.policyVersion(), 4);
    const ckdir = join(run.dir, "loop", "checkpoints");
    const kept = readdirSync(ckdir).filter((n) => n.startsWith("step-")).sort();
    assert.deepEqual(kept, ["step-00000002", "step-00000004"], "keep-last-2 of steps 0, 2, 4");
    assert.ok(existsSync(join(ckdir, "step-00000004", "manifest.json")));
    // Object store keeps only the newest weight versions.
    const objects = (await run.topology.objects.list()).map((o) => o.name).filter((n) => /^v\d+$/.test(n)).sort();
    assert.deepEqual(objects, ["v3", "v4"]);
    // Scored batches carry the env name@version and valid masks.
    const last = await run.topology.jsm.streams.getMessage(run.topology.names.streams.rollouts, { last_by_subj: run.topology.names.subjects.rolloutsScored });
    const { rows } = decodeRolloutBatch(last!.data);
    assert.match(rows[0]!.env, /^arithmetic@1\.\d+\.\d+$/);
    assert.ok(rows.every((r) => r.completionMask.length === r.completionIds.length));
  } finally {
    await run.close();
  }
});
