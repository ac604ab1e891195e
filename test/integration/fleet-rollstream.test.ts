// A short RL run with actors.inference.backend: rollstream against two real `rollstream serve` child processes
// (started on the run's config: its model, initial weights until the fleet pushes a version). One is SIGKILLed
// mid-run and restarted on its port: every task is scored exactly once, it rejoins on newer weights, and every
// row's per-token version spans are versions the servers' update logs say they loaded.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { cliMain, startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { StateKeys } from "../../streams/index.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { ServeProcess } from "../../deploy/local/serve-process.js";

test("an RL run on two rollstream serve processes: one SIGKILLed and restarted mid-run, every task scored once", async () => {
  const steps = 10;
  const run = await startRun("fleetrs", {
    rl: { steps, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
    actors: {
      inference: { replicas: 1, maxInFlight: 4, threads: 1, backend: "rollstream", servers: ["http://127.0.0.1:1"], fleet: { healthCheckMs: 200 } },
      reward: { replicas: 1, maxInFlight: 4 },
    },
  });
  const servers: ServeProcess[] = [];
  try {
    for (const i of [0, 1]) {
      const files = { updateLog: join(run.dir, `updates-${i}.jsonl`), stderrLog: join(run.dir, `serve-${i}.log`) };
      servers.push(await ServeProcess.start({ binPath: cliMain, source: ["-c", run.configPath], extraArgs: ["--threads", "1"], ...files }));
    }
    // The servers' ports are known only now: the inference actor reads them from the config it is started with.
    await rewriteServers(
      run.configPath,
      servers.map((s) => s.url),
    );
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    const names = run.topology.names;
    const countOn = async (subject: string) =>
      (await run.topology.jsm.streams.info(names.streams.rollouts, { subjects_filter: subject })).state.subjects?.[subject] ?? 0;
    await waitUntil("a first raw group", async () => (await countOn(names.subjects.rolloutsRaw)) >= 1, 90_000, `${run.dir}/logs`);
    await servers[1]!.kill();
    await waitUntil("learner step 2", async () => (await run.state.learnerStep()) >= 2, 120_000, `${run.dir}/logs`);
    const loadsBefore = servers[1]!.updates().length;
    await servers[1]!.restart();
    await waitUntil("the restarted server rejoins on the current weights", () => servers[1]!.updates().length > loadsBefore + 1, 60_000, `${run.dir}/logs`);
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 180_000, `${run.dir}/logs`);

    const raw = await countOn(names.subjects.rolloutsRaw);
    const scored = await storedMessages(run.topology.jsm, names.streams.rollouts, names.subjects.rolloutsScored);
    assert.equal(scored.length, raw, "one scored batch per raw group");
    const taskIds = new Set<string>();
    const versionsSeen = new Set<number>();
    let multiSpan = 0;
    for (const m of scored) {
      const { rows } = decodeRolloutBatch(m.data);
      assert.equal(rows.length, 4);
      assert.ok(!taskIds.has(rows[0]!.taskId), `task ${rows[0]!.taskId} scored twice`);
      taskIds.add(rows[0]!.taskId);
      for (const r of rows) {
        assert.equal(r.samplerLogprobs.length, r.completionIds.length);
        const spans = r.versionSpans.length ? r.versionSpans : [{ version: r.policyVersionMin, start: 0, end: r.completionIds.length }];
        if (r.versionSpans.length > 1) multiSpan++;
        for (const s of spans) versionsSeen.add(s.version);
        assert.equal(Math.min(...spans.map((s) => s.version)), r.policyVersionMin);
        assert.equal(Math.max(...spans.map((s) => s.version)), r.policyVersionMax);
      }
    }
    assert.ok(taskIds.size >= steps * 2, `at least ${steps * 2} tasks scored (${taskIds.size})`);

    // The update logs: each load's label and folder; every version on a row is one a server loaded.
    const logs = servers.map((s) => s.updates());
    const loaded = new Set(logs.flat().map((u) => Number(u.version)));
    for (const v of versionsSeen) assert.ok(loaded.has(v), `rows carry v${v}, which no server's update log has (${[...loaded]})`);
    for (const log of logs) {
      assert.equal(log[0]!.version, "init", "each server started on the run's initial weights");
      for (const u of log.filter((x) => x.version !== "init")) assert.ok(u.source.endsWith(`v${u.version}`), `${u.source} is the folder of v${u.version}`);
    }
    // The restarted process (a new pid) loaded a version at least as new as any its killed self had.
    const pids = [...new Set(logs[1]!.map((u) => u.pid))];
    assert.equal(pids.length, 2, "two processes served as server 1");
    const newest = (pid: number) => Math.max(...logs[1]!.filter((u) => u.pid === pid && u.version !== "init").map((u) => Number(u.version)));
    assert.ok(newest(pids[1]!) >= newest(pids[0]!), "the restarted server rejoined on newer weights");
    assert.ok(versionsSeen.size >= 2, "rows from more than one policy version");
    process.stdout.write(
      `fleet-rollstream: ${taskIds.size} tasks, versions ${[...versionsSeen].sort((a, b) => a - b)}, rows with several spans: ${multiSpan}\n`,
    );
  } finally {
    await run.close().catch(() => undefined);
    for (const s of servers) await s.stop();
  }
});

async function rewriteServers(configPath: string, urls: string[]): Promise<void> {
  const { readFileSync, writeFileSync } = await import("node:fs");
  const { parse, stringify } = await import("yaml");
  const cfg = parse(readFileSync(configPath, "utf8"));
  cfg.actors.inference.servers = urls;
  writeFileSync(configPath, stringify(cfg));
}
