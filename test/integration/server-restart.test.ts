// Fault test: the nats-server goes away mid-run and comes back on the same store. Actors reconnect
// (or are restarted by the launcher and restore their state), the run finishes, and no task is
// scored twice.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { startNatsServer } from "../../deploy/local/nats-server.js";
import { StateKeys } from "../../streams/index.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";

test("the run survives a nats-server restart and finishes without double-counting", async () => {
  const run = await startRun(
    "restart",
    {
      rl: { steps: 30, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
      checkpoint: { interval: 5, keepLast: 2, keepVersions: 3 },
      nats: { taskAckWaitMs: 3000 },
    },
    { maxRestarts: 5 },
  );
  let restarted: Awaited<ReturnType<typeof startNatsServer>> | null = null;
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("step 5", async () => (await run.state.learnerStep()) >= 5, 90_000, `${run.dir}/logs`);
    const { port, monitorPort, storeDir } = run.nats;
    await run.nats.stop();
    await new Promise((r) => setTimeout(r, 1500));
    restarted = await startNatsServer({ storeDir, port, monitorPort });
    // The test's own connection reconnects too.
    await waitUntil("all 30 steps after the restart", async () => (await run.state.learnerStep().catch(() => 0)) >= 30, 150_000, `${run.dir}/logs`);
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus).catch(() => null)) === "done", 30_000, `${run.dir}/logs`);
    const names = run.topology.names;
    const seen = new Map<string, number>();
    for (const m of await storedMessages(run.topology.jsm, names.streams.rollouts, names.subjects.rolloutsScored)) {
      const id = decodeRolloutBatch(m.data).rows[0]!.taskId;
      seen.set(id, (seen.get(id) ?? 0) + 1);
    }
    const twice = [...seen.entries()].filter(([, n]) => n > 1);
    assert.deepEqual(twice, [], "no task scored twice");
    assert.ok(seen.size >= 30 * 2, `${seen.size} distinct tasks scored`);
  } finally {
    if (process.env.RS_KEEP_LOGS) (await import("node:fs")).cpSync(`${run.dir}/logs`, process.env.RS_KEEP_LOGS, { recursive: true });
    await run.close();
    await restarted?.stop();
  }
});
