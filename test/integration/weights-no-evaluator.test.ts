// The weights the checkpoint actor keeps for the evaluator: scheduled versions not yet evaluated stay in the
// store only while the run has an evaluator. A run without one (train --no-eval) kept every scheduled version
// for good: a 1,000-step demo run with eval.interval 50 held 21 of them, 129 MB where 4 versions were asked for.
import { test } from "node:test";
import { join } from "node:path";
import { startRun, waitUntil } from "../helpers/run-fixture.js";
import { startInProcess } from "../helpers/in-process-actor.js";
import { CheckpointActor } from "../../actors/checkpoint/checkpoint.js";
import { HealthBoard, RunChannels } from "../../streams/index.js";

const VERSIONS = 13;

async function publishVersions(channels: RunChannels): Promise<void> {
  const bytes = new Uint8Array(4096);
  for (let v = 0; v <= VERSIONS; v++) {
    await channels.weights.publish({ version: v, step: v, phase: "rl", bytes });
    await new Promise((r) => setTimeout(r, 50)); // one at a time, as the learner publishes them
  }
}

for (const withEvaluator of [false, true]) {
  test(`weights pruning ${withEvaluator ? "with" : "without"} an evaluator in the run: scheduled versions ${withEvaluator ? "kept until evaluated" : "not held"}`, async () => {
    const name = withEvaluator ? "evalheld" : "noeval";
    const run = await startRun(name, {
      rl: { steps: VERSIONS, batchSize: 8, groupSize: 4, maxAsyncLevel: 1 },
      eval: { n: 8, interval: 4 },
      checkpoint: { interval: 2, keepLast: 2, keepVersions: 2 },
    });
    const channels = new RunChannels(run.topology.wire);
    if (withEvaluator) {
      // The evaluator's heartbeat as a running one writes it (the control: the same pruning then holds its versions).
      const now = new Date().toISOString();
      await new HealthBoard(run.topology.wire.health).beat({
        actor: "evaluator",
        instance: "e1",
        pid: process.pid,
        state: "waiting",
        what: "weights v4",
        idle: true,
        since: now,
        inFlight: 0,
        busyMs: 0,
        waitMs: {},
        idleRatio: {},
        lastLog: null,
        time: now,
        intervalMs: 1000,
      });
    }
    const actor = startInProcess("checkpoint", CheckpointActor, { nc: run.nc, config: run.config, topology: run.topology, runDir: join(run.dir, name) });
    try {
      await new Promise((r) => setTimeout(r, 500)); // its announcement subscription is a core one: it must be listening
      await publishVersions(channels);
      const expected = withEvaluator ? [0, 4, 8, 12, 13] : [12, 13];
      await waitUntil("pruning settled", async () => JSON.stringify(await channels.weights.storedVersions()) === JSON.stringify(expected), 10_000).catch(
        async (e: Error) => {
          throw new Error(`${e.message}: stored ${JSON.stringify(await channels.weights.storedVersions())}, expected ${JSON.stringify(expected)}`);
        },
      );
    } finally {
      await actor.stop();
      await run.close();
    }
  });
}
