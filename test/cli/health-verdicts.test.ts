// What doctor calls healthy, silent and stuck, on hand-made bucket entries (the bucket itself is tested
// against a real server in test/streams/health.test.ts, the whole command in test/integration/doctor.test.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { classifyInstance, classifyRun, DEFAULT_THRESHOLDS } from "../../cli/health/verdicts.js";
import type { HealthEntry, Heartbeat } from "../../streams/index.js";

const NOW = Date.parse("2030-01-01T00:10:00.000Z");
const iso = (ms: number) => new Date(ms).toISOString();

/** An entry written `ageMs` ago whose actor has been in its state for `forMs` at that write. */
function entry(over: Partial<Heartbeat>, ageMs: number, forMs = 1000, key?: string): HealthEntry {
  const written = NOW - ageMs;
  const hb: Heartbeat = {
    actor: "inference",
    instance: "inference-0",
    pid: 42,
    state: "working",
    what: "task r:0:1",
    idle: false,
    since: iso(written - forMs),
    inFlight: 1,
    busyMs: 1000,
    waitMs: {},
    idleRatio: {},
    lastLog: null,
    time: iso(written),
    intervalMs: 2000,
    ...over,
  };
  return { key: key ?? `${hb.actor}.${hb.instance}`, exited: key?.startsWith("exited.") ?? false, heartbeat: hb, written: new Date(written) };
}

test("a fresh heartbeat is healthy; one older than staleMs is silent", () => {
  const healthy = classifyInstance(entry({}, 1500), NOW, DEFAULT_THRESHOLDS);
  assert.equal(healthy.verdict, "healthy");
  assert.equal(healthy.forMs, 2500);
  const silent = classifyInstance(entry({}, 10_001), NOW, DEFAULT_THRESHOLDS);
  assert.equal(silent.verdict, "silent");
  assert.match(silent.reason, /no heartbeat for 10\.0 s \(last: working on task r:0:1\)/);
  assert.equal(classifyInstance(entry({}, 4000), NOW, { staleMs: 3000, stuckMs: 60_000 }).verdict, "silent");
});

test("working on one item or waiting on one specific thing past stuckMs is stuck; an idle wait never is", () => {
  const t = DEFAULT_THRESHOLDS;
  assert.equal(classifyInstance(entry({}, 1000, 58_000), NOW, t).verdict, "healthy");
  const work = classifyInstance(entry({}, 1000, 60_000), NOW, t);
  assert.equal(work.verdict, "stuck");
  assert.match(work.reason, /^working on task r:0:1 for 61\.0 s$/);
  const wait = classifyInstance(entry({ state: "waiting", what: "samples for step 3 (2 of 8)", actor: "learner", instance: "learner-0" }, 500, 90_000), NOW, t);
  assert.equal(wait.verdict, "stuck");
  assert.match(wait.reason, /waiting on samples for step 3 \(2 of 8\)/);
  assert.equal(classifyInstance(entry({ state: "waiting", what: "tasks", idle: true }, 500, 3_600_000), NOW, t).verdict, "healthy");
  assert.equal(classifyInstance(entry({ state: "starting", what: "" }, 500, 600_000), NOW, t).verdict, "healthy");
  assert.equal(classifyInstance(entry({ state: "draining" }, 500, 61_000), NOW, t).verdict, "stuck");
});

test("how long an actor has been on something does not depend on its own clock", () => {
  // The actor's clock runs an hour ahead: since and time are both off by the same hour.
  const e = entry({}, 2000, 5000);
  const hb = e.heartbeat!;
  const skewed = { ...e, heartbeat: { ...hb, since: iso(Date.parse(hb.since) + 3_600_000), time: iso(Date.parse(hb.time) + 3_600_000) } };
  const v = classifyInstance(skewed, NOW, DEFAULT_THRESHOLDS);
  assert.equal(v.forMs, 7000);
  assert.equal(v.verdict, "healthy");
});

test("a run is healthy when every live instance is, and something runs unless it is done", () => {
  const t = DEFAULT_THRESHOLDS;
  const ok = classifyRun([entry({}, 1000), entry({ actor: "learner", instance: "learner-0" }, 1000)], "running", NOW, t);
  assert.deepEqual([ok.healthy, ok.problems], [true, []]);
  const one = classifyRun([entry({}, 1000), entry({ actor: "learner", instance: "learner-0", lastLog: null }, 20_000)], "running", NOW, t);
  assert.equal(one.healthy, false);
  assert.deepEqual(one.problems, ["learner-0 silent: no heartbeat for 20.0 s (last: working on task r:0:1)"]);
  // A finished run whose actors exited cleanly.
  const exited = entry({ exitedAt: iso(NOW - 5000), state: "draining" }, 5000, 100, "exited.inference.inference-0");
  const done = classifyRun([exited], "done", NOW, t);
  assert.deepEqual([done.healthy, done.instances[0]!.verdict], [true, "exited"]);
  // The same, but the run is not done: nothing will finish it.
  const stopped = classifyRun([exited], "running", NOW, t);
  assert.equal(stopped.healthy, false);
  assert.match(stopped.problems[0]!, /no actor is running/);
  assert.equal(classifyRun([], "done", NOW, t).healthy, true);
  assert.equal(classifyRun([entry({}, 1000)], "failed", NOW, t).healthy, false);
  // A value nobody can read is a problem, named by its key.
  const bad = classifyRun([{ key: "reward.reward-0", exited: false, heartbeat: null, error: "instance: required", written: new Date(NOW) }], "running", NOW, t);
  assert.deepEqual(bad.problems, ["reward-0 unreadable: unreadable heartbeat: instance: required"]);
});

test("a remote environment server that does not answer health makes the run unhealthy, named with who saw it", () => {
  const remote = (healthy: boolean) => [{ env: "verifiers:rt@1.0.0", address: "tcp://h:5555", healthy, checkedAt: iso(NOW - 1000), inFlight: 3 }];
  const ok = classifyRun([entry({ remoteEnvs: remote(true) }, 1000)], "running", NOW);
  assert.equal(ok.healthy, true, ok.problems.join("; "));
  assert.equal(ok.instances[0]!.remoteEnvs![0]!.inFlight, 3);
  const down = classifyRun([entry({ remoteEnvs: remote(false) }, 1000)], "running", NOW);
  assert.equal(down.healthy, false);
  assert.deepEqual(down.problems, ["remote environment verifiers:rt@1.0.0 at tcp://h:5555 does not answer health (seen by inference-0)"]);
});
