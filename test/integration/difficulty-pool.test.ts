// Difficulty pools (rl.pool) with the real orchestrator on a real nats-server. The pass rates are written into
// KV by the test, so every choice is known in advance: with revisit 0 the orchestrator must dispatch exactly the
// examples the pure sampler gives from those stats (none outside the band), with rl.pool.quotas' share of every
// step per environment, and an orchestrator killed and started again in the middle must go on with the same
// choices. A group outcome is then applied to the stats once, as a running pass rate.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { decodeMsgpack } from "../../streams/msgpack-codec.js";
import { TaskSchema } from "../../streams/messages.js";
import { encode } from "@msgpack/msgpack";
import { Hdr, RunChannels, StateKeys } from "../../streams/index.js";
import { chooseExample, inBand, quotaEnvironment, type PoolStats } from "../../rl/difficulty-pool.js";
import { loadRunEnvironments } from "../../actors/runtime/environments.js";
import { outcomeOf } from "../helpers/feedback-fixtures.js";

const BAND: [number, number] = [0.1, 0.9];

test("the orchestrator dispatches what the pool sampler chooses from KV, keeps the quotas, and a restart changes nothing", async () => {
  const args = { digits: 1, ops: ["+"], seed: 3 };
  const run = await startRun("pool", {
    environments: [
      { id: "arithmetic@^1", key: "a", args },
      { id: "arithmetic@^1", key: "b", args },
    ],
    rl: { steps: 10, batchSize: 12, groupSize: 4, maxAsyncLevel: 3, pool: { band: BAND, revisit: 0, quotas: { a: 2, b: 1 } } },
  });
  try {
    // a: every even example always solved (outside the band); b: every third never solved; the rest inside.
    const stats: PoolStats = { seq: 1, envs: { a: {}, b: {} } };
    for (let i = 0; i < 200; i++) {
      stats.envs["a"]![String(i)] = i % 2 === 0 ? [2, 1] : [2, 0.5];
      stats.envs["b"]![String(i)] = i % 3 === 0 ? [2, 0] : [2, 0.4];
    }
    await run.state.put(StateKeys.poolStats, stats);
    const envs = [...(await loadRunEnvironments(run.config)).values()];
    // What the sampler must choose, task by task, from these stats.
    const cursor: Record<string, number> = {};
    const expected = Array.from({ length: 30 }, (_, index) => {
      const env = quotaEnvironment(envs, { a: 2, b: 1 }, index);
      const size = env.env.dataset("train").size;
      const c = chooseExample(stats.envs[env.key], cursor[env.key] ?? 0, size, run.config.seed, index, { band: BAND, revisit: 0 });
      cursor[env.key] = c.position + 1;
      const exampleIndex = Number.isFinite(size) ? c.position % size : c.position;
      assert.ok(inBand(stats.envs[env.key]![String(exampleIndex)], BAND));
      return `${env.key}:${exampleIndex}`;
    });
    const dispatched = async () =>
      (await storedMessages(run.topology.jsm, run.topology.names.streams.tasks))
        .map((m) => decodeMsgpack(TaskSchema, m.data))
        .sort((x, y) => x.index - y.index);
    const count = async () => (await run.topology.jsm.streams.info(run.topology.names.streams.tasks)).state.messages;

    run.launcher.start({ name: "orchestrator", replica: 0 });
    await run.state.put(StateKeys.policyVersion, 0);
    await run.state.put(StateKeys.learnerStep, 0);
    await waitUntil("steps 0..3 dispatched", async () => (await count()) === 12, 20_000, `${run.dir}/logs`);
    // Killed and started again: it goes on from KV with the same choices.
    await run.launcher.stopAll(5000);
    const { ActorLauncher } = await import("../../deploy/local/launcher.js");
    const { cliMain } = await import("../helpers/run-fixture.js");
    const launcher2 = new ActorLauncher({ binPath: cliMain, configPath: run.configPath, natsUrl: run.nats.url, logDir: `${run.dir}/logs`, maxRestarts: 0 });
    launcher2.start({ name: "orchestrator", replica: 0 });
    try {
      await run.state.put(StateKeys.learnerStep, 7);
      await waitUntil("every step dispatched", async () => (await count()) === 30, 20_000, `${run.dir}/logs`);
      const tasks = await dispatched();
      assert.deepEqual(
        tasks.map((t) => `${t.envKey}:${t.exampleIndex}`),
        expected,
      );
      assert.deepEqual(
        tasks.map((t) => t.index),
        Array.from({ length: 30 }, (_, i) => i),
        "each task once",
      );
      for (let step = 0; step < 10; step++) {
        const inStep = tasks.filter((t) => t.step === step).map((t) => t.envKey);
        assert.deepEqual(inStep.sort(), ["a", "a", "b"], `step ${step}`);
      }
      // A scored group moves its example's running pass rate (decay 0.5), once.
      const groups = new RunChannels(run.topology.wire).groups;
      // An outcome with a bad field (stored by a foreign producer, as no channel would) is dead-lettered by the
      // orchestrator with the reason, and moves no stats; the good one after it does.
      const bad = { ...outcomeOf(tasks[0]!, { envKey: "a", step: 0, exampleIndex: 3, passRate: 1, rewards: [1, 1] }), taskId: "foreign", passRate: -1 };
      await run.js.publish(run.topology.names.subjects.groups, encode(bad));
      await groups.publish(outcomeOf(tasks[0]!, { envKey: "a", step: 0, exampleIndex: 1, passRate: 1, rewards: [1, 1] }));
      await waitUntil("stats updated", async () => (await run.state.get(StateKeys.poolStats))?.envs["a"]?.["1"]?.[0] === 3, 20_000, `${run.dir}/logs`);
      assert.deepEqual((await run.state.get(StateKeys.poolStats))!.envs["a"]!["1"], [3, 0.75]);
      assert.deepEqual((await run.state.get(StateKeys.poolStats))!.envs["a"]!["3"], [2, 0.5], "the bad outcome moved no stats");
      const dead = await storedMessages(run.topology.jsm, run.topology.names.streams.events, run.topology.names.subjects.dlq);
      assert.equal(dead.length, 1);
      assert.equal(dead[0]!.header?.get(Hdr.actor), "orchestrator");
      assert.match(dead[0]!.header?.get(Hdr.error) ?? "", /^group outcome: .*passRate/);
      await run.state.put(StateKeys.learnerStep, 10);
      await waitUntil("done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 20_000, `${run.dir}/logs`);
    } finally {
      await launcher2.stopAll(5000);
    }
  } finally {
    await run.close();
  }
});
