// The orchestrator publishes tasks for RL step n only while n - learnerStep <= maxAsyncLevel.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startRun, waitUntil } from "../helpers/run-fixture.js";
import { StateKeys } from "../../streams/index.js";
import { decodeMsgpack } from "../../streams/msgpack-codec.js";
import { TaskSchema } from "../../streams/messages.js";

test("the dispatch gate holds at maxAsyncLevel and opens one step per learner step; restarts never duplicate tasks", async () => {
  const run = await startRun("gate", { rl: { steps: 6, batchSize: 8, groupSize: 4, maxAsyncLevel: 1 } });
  try {
    const promptsPerStep = 2;
    const taskCount = async () => (await run.topology.jsm.streams.info(run.topology.names.streams.tasks)).state.messages;
    // No policy yet: nothing may be dispatched.
    run.launcher.start({ name: "orchestrator", replica: 0 });
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(await taskCount(), 0, "tasks went out before any policy existed");
    await run.state.put(StateKeys.policyVersion, 0);
    await run.state.put(StateKeys.learnerStep, 0);
    // Steps 0 and 1 (maxAsyncLevel 1) may go out, and no more.
    await waitUntil("tasks for steps 0..1", async () => (await taskCount()) === 2 * promptsPerStep, 20_000, `${run.dir}/logs`);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(await taskCount(), 2 * promptsPerStep, "gate let more than maxAsyncLevel steps through");
    // Kill the orchestrator and start it again: it continues where it was, duplicates are deduplicated.
    await run.launcher.stopAll(5000);
    const { ActorLauncher } = await import("../../deploy/local/launcher.js");
    const { freePort } = await import("../../deploy/local/nats-server.js");
    const metricsPort = await freePort();
    const launcher2 = new ActorLauncher({
      binPath: (await import("../helpers/run-fixture.js")).cliMain,
      configPath: run.configPath,
      natsUrl: run.nats.url,
      logDir: `${run.dir}/logs`,
      maxRestarts: 0,
      metricsPortBase: metricsPort,
    });
    launcher2.start({ name: "orchestrator", replica: 0 });
    try {
      // Every actor serves Prometheus metrics when given a port.
      let body = "";
      await waitUntil(
        "/metrics",
        async () => {
          body = await fetch(`http://127.0.0.1:${metricsPort}/metrics`)
            .then((r) => r.text())
            .catch(() => "");
          return body.includes("rollstream_orchestrator_gate_waiting");
        },
        15_000,
        `${run.dir}/logs`,
      );
      assert.match(body, /rollstream_orchestrator_gate_waiting\{actor="orchestrator",run="gate"\} [01]/);
      assert.match(body, /rollstream_process_cpu_seconds_total\{actor="orchestrator"/);
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(await taskCount(), 2 * promptsPerStep);
      await run.state.put(StateKeys.learnerStep, 1);
      await waitUntil("tasks for step 2", async () => (await taskCount()) === 3 * promptsPerStep, 20_000, `${run.dir}/logs`);
      await new Promise((r) => setTimeout(r, 1000));
      assert.equal(await taskCount(), 3 * promptsPerStep);
      // Every task is distinct, indexed 0..5, with steps floor(index / promptsPerStep).
      const seen = new Set<string>();
      for (let seq = 1; seq <= 3 * promptsPerStep; seq++) {
        const m = await run.topology.jsm.streams.getMessage(run.topology.names.streams.tasks, { seq });
        const t = decodeMsgpack(TaskSchema, m!.data);
        assert.equal(t.step, Math.floor(t.index / promptsPerStep));
        assert.match(t.env, /^arithmetic@\d+\.\d+\.\d+$/);
        seen.add(t.taskId);
      }
      assert.equal(seen.size, 3 * promptsPerStep);
    } finally {
      await launcher2.stopAll(5000);
    }
  } finally {
    await run.close();
  }
});
