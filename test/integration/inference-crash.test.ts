// SIGKILL of the inference actor mid-run, then a restart: no task is lost and none is counted twice.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { RunChannels, StateKeys } from "../../streams/index.js";
import { PolicyModel } from "../../kernels/index.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { modelConfigOf } from "../../actors/runtime/model-factory.js";

test("SIGKILL of inference mid-run and a restart lose no task and count none twice", async () => {
  const run = await startRun("crash", {
    rl: { steps: 40, batchSize: 8, groupSize: 4, maxAsyncLevel: 100, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 24 } },
    nats: { taskAckWaitMs: 2000 },
    actors: { inference: { replicas: 1, maxInFlight: 2, threads: 1 }, reward: { replicas: 1, maxInFlight: 4 } },
  });
  try {
    const tasks = 80; // 40 steps x 2 prompts
    const model = PolicyModel.create(modelConfigOf(run.config), { seed: 1, threads: 1 });
    await new RunChannels(run.topology.wire).weights.publish({ version: 0, step: 0, phase: "rl", bytes: model.toSafetensors() });
    model.dispose();
    await run.state.put(StateKeys.policyVersion, 0);
    await run.state.put(StateKeys.learnerStep, 0);
    const names = run.topology.names;
    const countOn = async (subject: string) => {
      const info = await run.topology.jsm.streams.info(names.streams.rollouts, { subjects_filter: subject });
      return info.state.subjects?.[subject] ?? 0;
    };
    run.launcher.start({ name: "orchestrator", replica: 0 });
    run.launcher.start({ name: "reward", replica: 0 });
    run.launcher.start({ name: "inference", replica: 0 });
    await waitUntil("a few raw rollout groups", async () => (await countOn(names.subjects.rolloutsRaw)) >= 3, 60_000, `${run.dir}/logs`);
    // Kill while the actor holds tasks it has not acked yet, so they must be redelivered. A task can be
    // acked between our look and the kill, so look again once the process is gone (the server keeps a dead
    // consumer's deliveries pending until ack_wait) and, if it held none after all, restart and kill again.
    const pendingTasks = async () => (await run.topology.jsm.consumers.info(names.streams.tasks, names.consumers.inference)).num_ack_pending;
    let replica = 0;
    let heldAtKill = 0;
    for (let attempt = 0; attempt < 5 && heldAtKill === 0; attempt++) {
      if (attempt > 0) run.launcher.start({ name: "inference", replica: ++replica });
      await waitUntil("tasks in flight", async () => (await pendingTasks()) > 0, 30_000, `${run.dir}/logs`);
      const pid = run.launcher.pid("inference", replica)!;
      process.kill(pid, "SIGKILL");
      await waitUntil(
        "the killed actor is gone",
        () => {
          try {
            process.kill(pid, 0);
            return false;
          } catch {
            return true;
          }
        },
        10_000,
      );
      heldAtKill = await pendingTasks();
    }
    assert.ok(heldAtKill > 0, "the killed actor held unacked tasks");
    const rawAtKill = await countOn(names.subjects.rolloutsRaw);
    assert.ok(rawAtKill < tasks, "the run finished before the kill; make it longer");
    run.launcher.start({ name: "inference", replica: replica + 1 });
    await waitUntil("every task scored", async () => (await countOn(names.subjects.rolloutsScored)) >= tasks, 90_000, `${run.dir}/logs`);
    await new Promise((r) => setTimeout(r, 2500)); // a late duplicate would show up here
    await waitUntil(
      "every task acked",
      async () => {
        const ci = await run.topology.jsm.consumers.info(names.streams.tasks, names.consumers.inference);
        return ci.num_pending + ci.num_ack_pending === 0;
      },
      30_000,
      `${run.dir}/logs`,
    );
    assert.equal(await countOn(names.subjects.rolloutsRaw), tasks, "raw groups: one per task");
    assert.equal(await countOn(names.subjects.rolloutsScored), tasks, "scored batches: one per task");
    const taskIds = new Set<string>();
    for (const m of await storedMessages(run.topology.jsm, names.streams.rollouts, names.subjects.rolloutsScored)) {
      const { rows } = decodeRolloutBatch(m.data);
      assert.equal(rows.length, 4);
      taskIds.add(rows[0]!.taskId);
    }
    assert.equal(taskIds.size, tasks, "every task id exactly once");
    const ti = await run.topology.jsm.consumers.info(names.streams.tasks, names.consumers.inference);
    assert.equal(ti.num_pending + ti.num_ack_pending, 0, "no task left behind");
    assert.ok(
      ti.delivered.consumer_seq >= tasks + heldAtKill,
      `the ${heldAtKill} tasks held by the killed actor were redelivered (${ti.delivered.consumer_seq} deliveries for ${tasks} tasks)`,
    );
    assert.equal((await run.topology.jsm.streams.info(names.streams.tasks)).state.messages, 0, "work queue drained");
  } finally {
    await run.close();
  }
});
