// What a crash or a set-aside announcement leaves for the checkpoint actor at its start: state objects in the
// store that a newer checkpoint on disk supersedes (they only fill the store: deleted), a partial temp folder of
// a writer that died (swept). A state object newer than the disk's newest may still be announced: kept.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { startRun, waitUntil } from "../helpers/run-fixture.js";
import { startInProcess } from "../helpers/in-process-actor.js";
import { CheckpointActor } from "../../actors/checkpoint/checkpoint.js";
import { CheckpointDir } from "../../actors/runtime/checkpoint-dir.js";
import { RunChannels } from "../../streams/index.js";

test("checkpoint actor start: superseded state objects deleted, a newer one kept, a dead writer's partial folder swept", async () => {
  const run = await startRun("orphans", { rl: { steps: 8, batchSize: 8, groupSize: 4, maxAsyncLevel: 1 } });
  const runDir = join(run.dir, "orphans");
  const dir = new CheckpointDir(join(runDir, "checkpoints"), "orphans");
  dir.write(4, new Uint8Array(64).fill(4));
  const dead = spawnSync("true").pid!;
  mkdirSync(join(dir.root, `step-00000006.tmp-${dead}`));
  const channels = new RunChannels(run.topology.wire);
  for (const step of [2, 3, 5]) await channels.checkpoints.putObject(`state-${step}`, new Uint8Array(32).fill(step), `state ${step}`);
  assert.deepEqual((await channels.checkpoints.stateSteps()).sort(), [2, 3, 5], "control: the objects are there before the actor starts");
  const actor = startInProcess("checkpoint", CheckpointActor, { nc: run.nc, config: run.config, topology: run.topology, runDir });
  try {
    await waitUntil("superseded state objects deleted", async () => (await channels.checkpoints.stateSteps()).length === 1, 15_000);
    assert.deepEqual(await channels.checkpoints.stateSteps(), [5], "state-5 (newer than checkpoint 4) kept");
    assert.deepEqual(readdirSync(dir.root), ["step-00000004"], "the dead writer's partial folder is gone, the checkpoint stays");
    assert.ok(existsSync(join(dir.dirFor(4), "manifest.json")));
    assert.ok(actor.logs.some((l) => /deleted state objects superseded by a newer checkpoint/.test(l.msg)));
  } finally {
    await actor.stop();
    await run.close();
  }
});
