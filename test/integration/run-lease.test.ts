// A run has one owner (streams/lease.ts). Two `rollstream train` of one run: the second is refused in one line
// naming the first (host, pid, since) and launches nothing; a train whose previous owner's lease expired takes
// over; the run finishes with every step trained once. Two learners on one run: the second stands by (its
// heartbeat says so, it trains nothing) until the first is SIGKILLed, then takes over and finishes the run;
// the only steps recorded twice are bit-identical recomputes of the steps after the last checkpoint.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { connect } from "@nats-io/transport-node";
import { cliMain, exitOf, type RunFixture, startRun, storedMessages, storedSteps, tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { startTestNats } from "../helpers/nats.js";
import { testSampling } from "../helpers/rollout-fixtures.js";
import {
  decodeMsgpack,
  decodeRolloutBatch,
  HealthBoard,
  openStateBucket,
  RunState,
  StateKeys,
  StepRecordSchema,
  type Lease,
  type StepRecord,
} from "../../streams/index.js";
import { ensureTopology } from "../../streams/topology.js";

function plantedLease(renewedAt: number): Lease {
  return {
    holder: "elsewhere:4242:train",
    host: "elsewhere",
    pid: 4242,
    since: new Date(renewedAt - 60_000).toISOString(),
    renewedAt: new Date(renewedAt).toISOString(),
    ttlMs: 60_000,
  };
}

/** Every step 1..n recorded; a step recorded twice only with the same bits (a restored learner's recompute). */
function assertStepsOnce(steps: StepRecord[], n: number): Map<number, StepRecord[]> {
  const byStep = new Map<number, StepRecord[]>();
  for (const s of steps) byStep.set(s.step, [...(byStep.get(s.step) ?? []), s]);
  assert.deepEqual(
    [...byStep.keys()].sort((a, b) => a - b),
    Array.from({ length: n }, (_, i) => i + 1),
  );
  for (const [step, lives] of byStep) {
    const bits = lives.map((s) => JSON.stringify([s.loss, s.gradNorm, s.entropy, s.mismatchKl, s.maskedFraction, s.seqs]));
    assert.ok(
      bits.every((b) => b === bits[0]),
      `step ${step} recorded ${lives.length} times with different figures: ${bits.join(" | ")}`,
    );
  }
  return byStep;
}

test("a second train of a running run is refused naming the owner; an expired owner is taken over; every step trained once", async (t) => {
  const nats = await startTestNats();
  const dir = mkdtempSync(join(tmpdir(), "rs-lease-train-"));
  const run = "leasetrain";
  // Enough steps that the second train comes while the first one trains: a tiny model steps in milliseconds.
  const steps = 120;
  const nc = await connect({ servers: nats.url });
  try {
    const cfgPath = join(dir, "run.yaml");
    writeFileSync(
      cfgPath,
      stringify(tinyConfig(run, dir, { rl: { steps, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling } })),
    );
    const args = [cliMain, "train", cfgPath, "--nats", nats.url, "--no-eval", "--no-dashboard"];
    const kv = await openStateBucket(nc, run);
    // A live owner elsewhere (its pid means nothing here): refused, nothing launched, the folder untouched.
    await kv.put("lease.train", JSON.stringify(plantedLease(Date.now())));
    const refusedFirst = spawnSync(process.execPath, args, { encoding: "utf8", timeout: 60_000 });
    assert.equal(refusedFirst.status, 4, refusedFirst.stdout + refusedFirst.stderr);
    const line = refusedFirst.stderr.trim();
    assert.equal(line.split("\n").length, 1, line);
    assert.match(line, /^run leasetrain is being trained by elsewhere:4242:train \(host elsewhere, pid 4242, since \S+Z\): not starting a second train/);
    assert.doesNotMatch(refusedFirst.stdout, /actors started/);
    assert.equal(existsSync(join(dir, run, "logs", "learner-0.log")), false, "no actor launched");
    assert.equal(existsSync(join(dir, run, "config.yaml")), false, "the run's folder untouched");

    // The same owner, silent for longer than its ttl: the next train takes over.
    await kv.put("lease.train", JSON.stringify(plantedLease(Date.now() - 61_000)));
    let out = "";
    const first = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"] });
    first.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    first.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    await waitUntil("train's actors started", () => /actors started/.test(out), 60_000);
    assert.match(out, /run leasetrain: taking over from elsewhere:4242:train \(its lease expired\)/);
    const state = new RunState(kv);
    await waitUntil("RL under way", async () => (await state.learnerStep()) >= 2, 60_000, join(dir, run, "logs"));

    const second = spawnSync(process.execPath, args, { encoding: "utf8", timeout: 60_000 });
    const stepAtRefusal = await state.learnerStep();
    assert.ok(stepAtRefusal < steps, `the first train was still running (step ${stepAtRefusal})`);
    t.diagnostic(`second train refused at step ${stepAtRefusal} of ${steps}`);
    assert.equal(second.status, 4, second.stdout + second.stderr);
    const named = second.stderr.trim();
    assert.equal(named.split("\n").length, 1, named);
    const host = hostname();
    assert.match(
      named,
      new RegExp(`^run leasetrain is being trained by ${host}:${first.pid}:train \\(host ${host}, pid ${first.pid}, since \\S+Z\\): not starting`),
    );
    assert.doesNotMatch(second.stdout, /actors started/);

    assert.equal(await exitOf(first), 0, out);
    assert.equal(await state.get(StateKeys.runStatus), "done");
    // One learner life: the second train launched none, and nothing was trained twice.
    const learnerLog = readFileSync(join(dir, run, "logs", "learner-0.log"), "utf8");
    assert.equal(learnerLog.split("\n").filter((l) => l.includes('"msg":"starting"')).length, 1, learnerLog.slice(0, 2000));
    const topo = await ensureTopology(nc, run);
    const recorded = (await storedMessages(topo.jsm, topo.names.streams.events, topo.names.subjects.steps)).map((m) => decodeMsgpack(StepRecordSchema, m.data));
    const byStep = assertStepsOnce(recorded, steps);
    assert.equal(recorded.length, steps, "each step recorded once");
    for (const [step, [s]] of byStep) assert.ok(s!.rows.trained >= 8, `step ${step}: ${s!.rows.trained} rows`);
    // Nothing lost or doubled upstream either: every task scored once.
    const scored = (await storedMessages(topo.jsm, topo.names.streams.rollouts, topo.names.subjects.rolloutsScored)).map(
      (m) => decodeRolloutBatch(m.data).rows[0]!.taskId,
    );
    assert.equal(new Set(scored).size, scored.length, "no task scored twice");
    // Given back on the way out: the next train finds the run free (and done).
    assert.equal(await state.get("lease.train"), undefined);
    const third = spawnSync(process.execPath, args, { encoding: "utf8", timeout: 60_000 });
    assert.equal(third.status, 0, third.stdout + third.stderr);
    assert.match(third.stdout, /already finished/);
  } finally {
    await nc.close();
    await nats.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});

/** The learner's "step" log lines of one instance, with their times. */
function stepLines(run: RunFixture, instance: string): Array<{ step: number; time: number }> {
  const file = join(run.dir, "logs", `${instance}.log`);
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.includes('"msg":"step"'))
    .map((l) => JSON.parse(l) as { step: number; time: string })
    .map((l) => ({ step: l.step, time: Date.parse(l.time) }));
}

test("a second learner stands by while the first holds the lease, and takes over when it is SIGKILLed", async (t) => {
  // Enough steps that the standby starts, and the kill lands, mid-run: a tiny model steps in milliseconds.
  const steps = 150;
  const ttlMs = 4_000;
  const run = await startRun("leaselearner", {
    rl: { steps, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 3, sampling: testSampling },
    checkpoint: { interval: 4, keepLast: 3, keepVersions: 3 },
    actors: { inference: { replicas: 1, maxInFlight: 4, threads: 1 }, reward: { replicas: 1, maxInFlight: 4 }, lease: { ttlMs, renewMs: 1_000 } },
  });
  const logs = join(run.dir, "logs");
  try {
    for (const name of ["checkpoint", "orchestrator", "inference", "reward", "learner"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("learner-0 holds the lease", async () => (await run.state.get("lease.learner"))?.holder.endsWith(":learner-0") === true, 60_000, logs);
    run.launcher.start({ name: "learner", replica: 1 });
    const standbyLog = () => (existsSync(join(logs, "learner-1.log")) ? readFileSync(join(logs, "learner-1.log"), "utf8") : "");
    await waitUntil("learner-1 standing by", () => /standing by: learner lease held by \S+:learner-0 \(host /.test(standbyLog()), 60_000, logs);
    // Its heartbeat says what it waits on (the next beat after it began standing by).
    const standbyBeat = async () =>
      (await new HealthBoard(run.topology.wire.health).read()).find((e) => e.heartbeat?.instance === "learner-1" && !e.exited)?.heartbeat;
    await waitUntil("learner-1's heartbeat names the lease", async () => (await standbyBeat())?.state === "waiting", 10_000, logs);
    const beat = await standbyBeat();
    assert.match(beat?.what ?? "", /^lease held by \S+:learner-0$/, JSON.stringify(beat));
    assert.equal(beat?.idle, true, "standing by is not stuck");
    // Kill between checkpoints, so the new holder restores and recomputes steps.
    await waitUntil(
      "a step between checkpoints",
      async () => {
        const step = await run.state.learnerStep();
        return step >= 6 && step % 4 !== 0 && ((await run.state.get(StateKeys.checkpointLatest)) ?? -1) >= 4;
      },
      90_000,
      logs,
    );
    const stepAtKill = await run.state.learnerStep();
    const killedAt = Date.now();
    process.kill(run.launcher.pid("learner", 0)!, "SIGKILL");
    await waitUntil(
      "learner-1 holds the lease",
      async () => (await run.state.get("lease.learner"))?.holder.endsWith(":learner-1") === true,
      ttlMs + 5_000,
      logs,
    );
    const tookOverMs = Date.now() - killedAt;
    assert.ok(tookOverMs < ttlMs + 2_000, `taken over ${tookOverMs} ms after the kill`);
    assert.match(standbyLog(), /took over the learner lease from \S+:learner-0 \((holder gone|expired)\)/);
    await waitUntil(
      `${steps} steps and the final checkpoint`,
      async () => (await run.state.learnerStep()) >= steps && ((await run.state.get(StateKeys.checkpointLatest)) ?? -1) >= steps,
      120_000,
      logs,
    );

    // The standby trained nothing while it stood by; the same probe sees everything it trained after the takeover
    // (the positive control: were it training beside learner-0, its lines would be there, and earlier).
    const standbySteps = stepLines(run, "learner-1");
    assert.ok(standbySteps.length >= steps - stepAtKill, `learner-1 trained ${standbySteps.length} steps after the takeover`);
    for (const s of standbySteps) assert.ok(s.time >= killedAt, `learner-1 trained step ${s.step} before learner-0 was killed`);
    // And it stood by while there was work: learner-0 trained steps between its "standing by" and the kill.
    const standingSince = Date.parse(
      JSON.parse(
        standbyLog()
          .split("\n")
          .find((l) => l.includes("standing by"))!,
      ).time,
    );
    const meanwhile = stepLines(run, "learner-0").filter((s) => s.time > standingSince && s.time < killedAt);
    assert.ok(meanwhile.length >= 2, `learner-0 trained ${meanwhile.length} steps while learner-1 stood by`);
    const recorded = await storedSteps(run);
    const byStep = assertStepsOnce(recorded, steps);
    // Before the kill, one owner: no step recorded twice. After it, only the restored learner's recomputes.
    const early = recorded.filter((s) => s.time < killedAt);
    assert.equal(new Set(early.map((s) => s.step)).size, early.length, "a step recorded twice before the kill");
    // Exactly the steps after the checkpoint the new holder restored, up to learner-0's last one, were done again.
    const restored = standbyLog()
      .split("\n")
      .find((l) => l.includes("restored from checkpoint"));
    assert.ok(restored, "the new holder restored a checkpoint");
    const restoredStep = JSON.parse(restored).step as number;
    const lastBeforeKill = Math.max(...early.map((s) => s.step));
    const twice = [...byStep.entries()].filter(([, l]) => l.length > 1).map(([step]) => step);
    assert.deepEqual(
      twice,
      Array.from({ length: lastBeforeKill - restoredStep }, (_, i) => restoredStep + i + 1),
    );
    t.diagnostic(
      `killed at step ${lastBeforeKill}; taken over in ${tookOverMs} ms; restored step ${restoredStep}; ${twice.length} steps recomputed bit-identically`,
    );
  } finally {
    await run.close();
  }
});

test("control: a second learner that ignores its lease trains beside the first, and both checks above catch it; a holder whose lease is taken exits", async () => {
  const run = await startRun("leasecontrol", {
    rl: { steps: 150, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 3, sampling: testSampling },
    checkpoint: { interval: 4, keepLast: 3, keepVersions: 3 },
  });
  const logs = join(run.dir, "logs");
  try {
    for (const name of ["checkpoint", "orchestrator", "inference", "reward", "learner"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("learner-0 holds the lease", async () => (await run.state.get("lease.learner"))?.holder.endsWith(":learner-0") === true, 60_000, logs);
    await waitUntil("a checkpoint", async () => ((await run.state.get(StateKeys.checkpointLatest)) ?? -1) >= 4, 60_000, logs);
    // As before leases: a second learner on the run, nobody killed.
    run.launcher.start({ name: "learner", replica: 1, env: { ROLLSTREAM_FAILPOINTS: "lease.ignore=learner" } });
    let recorded: StepRecord[] = [];
    await waitUntil(
      "a step recorded twice",
      async () => {
        recorded = await storedSteps(run);
        return new Set(recorded.map((s) => s.step)).size < recorded.length;
      },
      60_000,
      logs,
    );
    const now = Date.now();
    assert.equal((await run.state.get("lease.learner"))?.holder.endsWith(":learner-0"), true, "learner-0 still holds the lease");
    // The standby check ("no step line of learner-1 before the kill", with the kill now) fails here...
    assert.ok(
      stepLines(run, "learner-1").some((s) => s.time < now),
      "learner-1 trained while learner-0 held the lease",
    );
    // ...and so does "no step recorded twice before the kill".
    const early = recorded.filter((s) => s.time < now);
    assert.ok(new Set(early.map((s) => s.step)).size < early.length);

    // A holder that finds its lease taken stops at once (for its launcher to start it again as a standby).
    const pid = run.launcher.pid("learner", 0)!;
    await run.topology.kv.put("lease.learner", JSON.stringify(plantedLease(Date.now())));
    await waitUntil("learner-0 exits", () => !existsSync(`/proc/${pid}`) || readFileSync(`/proc/${pid}/stat`, "utf8").includes(") Z "), 10_000, logs);
    assert.match(
      readFileSync(join(logs, "learner-0.log"), "utf8"),
      /"why":"the learner lease is now held by elsewhere:4242:train[^"]*","msg":"lease lost: exiting/,
    );
  } finally {
    await run.close();
  }
});

test("embedded mode: a second train (--fresh too) finds the run's live nats-server, is refused there, starts no server and deletes nothing", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-lease-embedded-"));
  const cfgPath = join(dir, "run.yaml");
  writeFileSync(
    cfgPath,
    stringify(tinyConfig("leaseemb", dir, { rl: { steps: 200, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling } })),
  );
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.NATS_URL;
  const args = [cliMain, "train", cfgPath, "--no-eval", "--no-dashboard"];
  let out = "";
  const first = spawn(process.execPath, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  first.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  first.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  try {
    const stepsFile = join(dir, "leaseemb", "steps.jsonl");
    const stepCount = () => (existsSync(stepsFile) ? readFileSync(stepsFile, "utf8").trim().split("\n").length : 0);
    await waitUntil("RL under way", () => stepCount() >= 2, 60_000);
    const url = /started nats-server at (nats:\/\/\S+)/.exec(out)![1]!;
    // --fresh too: refused before it deletes anything of the running run.
    const second = spawnSync(process.execPath, [...args, "--fresh"], { env, encoding: "utf8", timeout: 60_000 });
    assert.equal(second.status, 4, second.stdout + second.stderr);
    assert.match(second.stdout, new RegExp(`the run's nats-server is already running at ${url}: using it`));
    assert.doesNotMatch(second.stdout, /started nats-server/);
    assert.match(second.stderr, new RegExp(`^run leaseemb is being trained by \\S+:${first.pid}:train `));
    assert.equal(first.exitCode, null, "the first train runs on");
    assert.ok(existsSync(join(dir, "leaseemb", "logs", "learner-0.log")) && existsSync(join(dir, "leaseemb", "config.yaml")), "its folder kept");
    // Its streams too: it goes on training.
    const stepsBefore = stepCount();
    await waitUntil("more steps", () => stepCount() > stepsBefore + 2, 30_000);
    first.kill("SIGINT");
    assert.equal(await exitOf(first), 130, out);
    // Once it stopped (lease given back), --fresh starts the run over: 3 steps, from nothing.
    writeFileSync(
      cfgPath,
      stringify(tinyConfig("leaseemb", dir, { rl: { steps: 3, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling } })),
    );
    const fresh = spawnSync(process.execPath, [...args, "--fresh"], { env, encoding: "utf8", timeout: 90_000 });
    assert.equal(fresh.status, 0, fresh.stdout + fresh.stderr);
    assert.match(fresh.stdout, /RL finished: 3 steps/);
    const stepLinesAfter = readFileSync(stepsFile, "utf8").trim().split("\n");
    assert.deepEqual(
      stepLinesAfter.map((l) => JSON.parse(l).step),
      [1, 2, 3],
    );
  } finally {
    // Ctrl-C, not a kill: train stops the actors and the server it started (they would outlive a SIGKILL).
    if (first.exitCode === null) {
      first.kill("SIGINT");
      await Promise.race([exitOf(first), new Promise((r) => setTimeout(r, 30_000))]);
    }
    rmSync(dir, { recursive: true, force: true });
  }
});
