// A short RL run with actors.inference.backend: sglang against two SGLang test servers that sample with our
// own tiny model, loaded from the HF folders the inference actor exports for each policy version. One server is
// killed mid-run and comes back: every task is still scored exactly once, the server rejoins on newer weights,
// and every row's versions are versions the servers were updated to.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { StateKeys } from "../../streams/index.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { modelSource } from "../helpers/engine-double.js";
import { TestEngineServer } from "../helpers/test-engine-server.js";

test("an RL run on two SGLang servers: one killed and restarted mid-run, every task scored once", async () => {
  const servers = [await TestEngineServer.sglang({ source: modelSource() }), await TestEngineServer.sglang({ source: modelSource() })];
  // Enough steps that the run is still going when the restarted server's health check lets it rejoin.
  const steps = 10;
  const run = await startRun("fleet", {
    rl: { steps, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
    actors: {
      inference: { replicas: 1, maxInFlight: 4, threads: 1, backend: "sglang", servers: servers.map((s) => s.url), fleet: { healthCheckMs: 200 } },
      reward: { replicas: 1, maxInFlight: 4 },
    },
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    const names = run.topology.names;
    const countOn = async (subject: string) =>
      (await run.topology.jsm.streams.info(names.streams.rollouts, { subjects_filter: subject })).state.subjects?.[subject] ?? 0;
    await waitUntil("a first raw group", async () => (await countOn(names.subjects.rolloutsRaw)) >= 1, 60_000, `${run.dir}/logs`);
    await servers[1]!.kill();
    await waitUntil("learner step 2", async () => (await run.state.learnerStep()) >= 2, 90_000, `${run.dir}/logs`);
    const loadsBeforeRestart = servers[1]!.engine.loads.length;
    await servers[1]!.restart();
    await waitUntil(
      "the restarted server rejoins on the current weights",
      () => servers[1]!.engine.loads.length > loadsBeforeRestart,
      60_000,
      `${run.dir}/logs`,
    );
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 120_000, `${run.dir}/logs`);

    // Every task scored exactly once.
    const raw = await countOn(names.subjects.rolloutsRaw);
    const scored = await storedMessages(run.topology.jsm, names.streams.rollouts, names.subjects.rolloutsScored);
    assert.equal(scored.length, raw, "one scored batch per raw group");
    const taskIds = new Set<string>();
    const versionsSeen = new Set<number>();
    for (const m of scored) {
      const { rows } = decodeRolloutBatch(m.data);
      assert.equal(rows.length, 4);
      assert.ok(!taskIds.has(rows[0]!.taskId), `task ${rows[0]!.taskId} scored twice`);
      taskIds.add(rows[0]!.taskId);
      for (const r of rows) {
        assert.equal(r.samplerLogprobs.length, r.completionIds.length);
        for (const v of [r.policyVersionMin, r.policyVersionMax, ...r.versionSpans.map((s) => s.version)]) versionsSeen.add(v);
      }
    }
    assert.ok(taskIds.size >= steps * 2, `at least ${steps * 2} tasks scored (${taskIds.size})`);

    // Both servers served, each update came from an exported HF folder, and every version on a row is one
    // a server was updated to; the restarted server rejoined with newer weights than it had.
    const loaded = new Set(servers.flatMap((s) => s.engine.loads.map(([label]) => Number(label))));
    for (const v of versionsSeen) assert.ok(loaded.has(v), `rows carry v${v}, which no server loaded (${[...loaded]})`);
    for (const s of servers) {
      assert.ok(s.engine.received.some((r) => r.route === "/generate"));
      for (const [label, dir] of s.engine.loads) assert.ok(dir.endsWith(`v${label}`), `${dir} is the folder of v${label}`);
    }
    assert.ok(servers[1]!.engine.loads.length > loadsBeforeRestart, "the restarted server loaded the current weights on rejoining");
    assert.ok(versionsSeen.size >= 2, "rows from more than one policy version");
  } finally {
    await run.close();
    for (const s of servers) await s.kill();
  }
});
