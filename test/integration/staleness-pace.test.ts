// rl.staleness with every actor as a process on a real nats-server, in a run where some groups reach the learner
// late: each step has one prompt of an environment whose rubric takes 1.5 s (slow@1.0.0, a long rollout of a
// hard problem) and one of an environment scored at once (fast@1.0.0), fixed by rl.pool.quotas. Under drop the
// learner trains on the fast groups while a slow one is scored, and the slow one arrives past the bound and is
// dropped: the bias the issue is about, visible by environment in the step records (the control). Under pace the
// orchestrator holds back work that would let the learner run past a straggler, so nothing is ever trained past
// the bound, checked row by row against the stream sequences each step recorded, and nothing is dropped.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startRun, storedSteps, waitUntil, type RunFixture, replayInProcess } from "../helpers/run-fixture.js";
import { writeTimedEnv } from "../helpers/slow-env.js";
import { testSampling } from "../helpers/rollout-fixtures.js";
import { RunChannels, StateKeys, type StepRecord } from "../../streams/index.js";

const BOUND = 1;
const STEPS = 6;

async function withTimedRun(run: string, staleness: "drop" | "pace", body: (r: RunFixture, steps: StepRecord[], ms: number) => Promise<void>) {
  const dir = mkdtempSync(join(tmpdir(), "rs-pace-envs-"));
  const before = process.env["ROLLSTREAM_ENV_PATH"];
  writeTimedEnv(dir, "slow", 1500);
  process.env["ROLLSTREAM_ENV_PATH"] = writeTimedEnv(dir, "fast", 0);
  const r = await startRun(run, {
    environments: [
      { id: "slow@^1", key: "slow" },
      { id: "fast@^1", key: "fast" },
    ],
    rl: {
      steps: STEPS,
      batchSize: 8,
      groupSize: 4,
      maxAsyncLevel: 1,
      maxOffPolicySteps: BOUND,
      staleness,
      pool: { band: [0, 1], quotas: { slow: 1, fast: 1 } },
      sampling: testSampling,
    },
    checkpoint: { interval: 2, keepLast: 2, keepVersions: 2 },
  });
  try {
    const started = Date.now();
    for (const name of ["checkpoint", "learner", "orchestrator", "inference", "reward"]) r.launcher.start({ name, replica: 0 });
    await waitUntil("run done", async () => (await r.state.get(StateKeys.runStatus)) === "done", 180_000, `${r.dir}/logs`);
    const steps = await storedSteps(r);
    await body(r, steps, Date.now() - started);
  } finally {
    if (before === undefined) delete process.env["ROLLSTREAM_ENV_PATH"];
    else process.env["ROLLSTREAM_ENV_PATH"] = before;
    await r.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

type Outcome = StepRecord["cells"][number]["outcome"];
/** Rows of an outcome over the steps, of one environment or length quarter when given (from the steps' staleness cells). */
const total = (steps: StepRecord[], outcome: Outcome, where: { env?: string; length?: string } = {}) =>
  steps.reduce(
    (n, e) =>
      n +
      e.cells
        .filter((c) => c.outcome === outcome && (where.env === undefined || c.env === where.env) && (where.length === undefined || c.length === where.length))
        .reduce((k, c) => k + c.count, 0),
    0,
  );
const SLOW = { env: "slow@1.0.0" };
const FAST = { env: "fast@1.0.0" };

const figures = (steps: StepRecord[], ms: number) =>
  `${ms} ms; trained ${total(steps, "trained")}, dropped ${total(steps, "droppedStale")} (slow ${total(steps, "droppedStale", SLOW)}), delayed ${total(steps, "delayed", SLOW) + total(steps, "delayed", FAST)}, mean staleness ${(steps.reduce((s, e) => s + e.stalenessMean, 0) / steps.length).toFixed(2)}`;

test("pace: no sample is ever trained past maxOffPolicySteps, stragglers are waited for rather than dropped; replay follows the recorded steps", async (t) => {
  await withTimedRun("pace", "pace", async (r, steps, ms) => {
    t.diagnostic(`pace: ${figures(steps, ms)}`);
    assert.equal(steps.length, STEPS);
    const channels = new RunChannels(r.topology.wire);
    let rows = 0;
    for (const e of steps) {
      const version = e.step - 1;
      assert.equal(e.staleness, "pace");
      assert.ok(e.stalenessMax <= BOUND, `step ${e.step}: staleness ${e.stalenessMax}`);
      // Independently of the learner's own figures: the messages it recorded, row by row.
      const seqs = e.seqs;
      assert.ok(seqs.length >= 2, `step ${e.step} recorded ${seqs}`);
      for (const seq of seqs) {
        const m = await r.topology.jsm.streams.getMessage(r.topology.names.streams.rollouts, { seq });
        for (const row of (await channels.scored.decodeMessage({ data: m!.data, headers: m!.header })).rows) {
          assert.ok(version - row.policyVersionMin <= BOUND, `step ${e.step} trained seq ${seq} from v${row.policyVersionMin}`);
          rows++;
        }
      }
      assert.equal(e.rows.trained, total([e], "trained"), `step ${e.step}: every trained row is in a cell`);
    }
    assert.equal(
      rows,
      steps.reduce((n, e) => n + e.rows.trained, 0),
    );
    assert.equal(total(steps, "droppedStale"), 0, "pacing left nothing to drop in this scenario");
    assert.ok(total(steps, "trained", SLOW) >= 4 * (STEPS - 1), `slow groups trained: ${total(steps, "trained", SLOW)}`);
    // The pool's stats (band [0, 1]: every example in it) were kept from the reward actor's groups, for both environments.
    const stats = await r.state.get(StateKeys.poolStats);
    assert.ok(stats && Object.keys(stats.envs["slow"] ?? {}).length > 0 && Object.keys(stats.envs["fast"] ?? {}).length > 0, JSON.stringify(stats));
    // Replay from the oldest kept checkpoint takes the messages each step recorded and reproduces its losses.
    const { code, lines, rows: replayed } = await replayInProcess({ config: r.configPath, steps: "2", nats: r.nats.url });
    assert.equal(code, 0, lines.join("\n"));
    assert.equal(replayed.length, 2, lines.join("\n"));
    assert.ok(
      replayed.every((x) => x.exact === true),
      lines.join("\n"),
    );
  });
});

test("control: drop, under the same scenario, drops the slow environment's groups as stale", async (t) => {
  await withTimedRun("dropctl", "drop", async (_r, steps, ms) => {
    t.diagnostic(`drop: ${figures(steps, ms)}`);
    assert.equal(steps.length, STEPS);
    const droppedSlow = total(steps, "droppedStale", SLOW);
    assert.ok(droppedSlow >= 4, `slow samples dropped: ${droppedSlow}`);
    assert.ok(droppedSlow > total(steps, "droppedStale", FAST), "the drops fall on the slow environment");
    const byLength = ["q1", "q2", "q3", "q4"].reduce((s, q) => s + total(steps, "droppedStale", { length: q }), 0);
    assert.equal(
      byLength,
      steps.reduce((n, e) => n + e.rows.droppedStale, 0),
      "every dropped sample is in a length bucket",
    );
  });
});
