// The zero-variance filter (rl.filter) with every actor as a process on a real nats-server. A test environment
// makes groups of known kinds: all-wrong (rewards below 1e-4: inside the tolerance, yet normalised advantages
// would be ±1), all-right, and graded ones. The learner must never train on a zero-variance group except past
// the replacement cap, and then only with advantages of exactly zero; every step must still get batchSize
// samples, the orchestrator replacing each left-out group. Positive controls: zero-variance groups did arise
// and were left out (the filter had work to do), and an environment that is all-wrong hits the cap, which is
// reported, without hanging the run.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startRun, storedMessages, storedOutcomes, storedSteps, waitUntil, type RunFixture } from "../helpers/run-fixture.js";
import { writeZeroVarianceEnv, ZERO_VARIANCE_NOISE } from "../helpers/zero-variance-env.js";
import { testSampling } from "../helpers/rollout-fixtures.js";
import { decodeMsgpack, MetricsEventSchema, RunChannels, StateKeys, type MetricsEvent, type RolloutRow } from "../../streams/index.js";
import { groupAdvantages, isZeroVariance } from "../../rl/advantages.js";

const TOLERANCE = 1e-3;

async function withZeroVarianceRun(run: string, args: Record<string, unknown>, rl: Record<string, unknown>, body: (r: RunFixture) => Promise<void>) {
  const dir = mkdtempSync(join(tmpdir(), "rs-zv-envs-"));
  const before = process.env["ROLLSTREAM_ENV_PATH"];
  process.env["ROLLSTREAM_ENV_PATH"] = writeZeroVarianceEnv(dir);
  const r = await startRun(run, {
    environments: [{ id: "zerovar@^1", args }],
    rl: { batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling, ...rl },
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "inference", "reward"]) r.launcher.start({ name, replica: 0 });
    await waitUntil("run done", async () => (await r.state.get(StateKeys.runStatus)) === "done", 120_000, `${r.dir}/logs`);
    await body(r);
  } finally {
    if (before === undefined) delete process.env["ROLLSTREAM_ENV_PATH"];
    else process.env["ROLLSTREAM_ENV_PATH"] = before;
    await r.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Every scored row of the run, grouped by task. */
async function scoredGroups(r: RunFixture): Promise<Map<string, RolloutRow[]>> {
  const reader = new RunChannels(r.topology.wire).scored.reader(1, { actor: "test", readOnly: true });
  const groups = new Map<string, RolloutRow[]>();
  try {
    for (let rows = await reader.next(500); rows !== null; rows = await reader.next(500)) {
      for (const row of rows) groups.set(row.taskId, [...(groups.get(row.taskId) ?? []), row]);
    }
  } finally {
    await reader.close();
  }
  return groups;
}

async function events(r: RunFixture, actor: string, kind: string): Promise<MetricsEvent[]> {
  const stored = await storedMessages(r.topology.jsm, r.topology.names.streams.events, r.topology.names.subjects.metrics(actor));
  return stored.map((m) => decodeMsgpack(MetricsEventSchema, m.data)).filter((e) => e.kind === kind);
}

const spread = (rows: RolloutRow[]) => Math.max(...rows.map((x) => x.reward)) - Math.min(...rows.map((x) => x.reward));

test("the filter: groups are judged on raw rewards, not on advantages that normalisation inflates (unit, with its positive control)", () => {
  const allWrong = [0, 0, ZERO_VARIANCE_NOISE, 0];
  assert.ok(isZeroVariance(allWrong, TOLERANCE), "an all-wrong group with reward noise inside the tolerance carries no signal");
  const normalised = groupAdvantages(allWrong, true);
  assert.ok(Math.max(...normalised.map(Math.abs)) > 1, `normalised, its advantages look informative: ${normalised}`);
  assert.ok(isZeroVariance([1, 1, 1, 1], 0) && isZeroVariance([0.5], 0) && isZeroVariance([], 0));
  assert.ok(!isZeroVariance([0, 1, 0, 0], TOLERANCE) && !isZeroVariance([0, 2e-3], TOLERANCE));
});

test("the learner never trains on a zero-variance group, every step is full, and each left-out group is replaced", async () => {
  const maxRefillRounds = 3;
  await withZeroVarianceRun(
    "zvmix",
    {},
    { steps: 4, normalizeAdvantage: true, filter: { zeroVariance: true, tolerance: TOLERANCE, maxRefillRounds } },
    async (r) => {
      const groups = await scoredGroups(r);
      assert.ok(groups.size > 0);
      let informative = 0,
        capped = 0;
      for (const [taskId, rows] of groups) {
        if (spread(rows) > TOLERANCE) {
          informative++;
          continue;
        }
        capped++;
        // Only past the cap, and never as informative: every advantage exactly zero.
        assert.match(
          taskId,
          new RegExp(`~r${maxRefillRounds}$`),
          `zero-variance group ${taskId} (rewards ${rows.map((x) => x.reward)}) was trained on before the cap`,
        );
        assert.deepEqual(
          rows.map((x) => x.advantage),
          rows.map(() => 0),
          `${taskId} went through with non-zero advantages`,
        );
      }
      assert.ok(informative + capped >= 8 && informative > capped, `${informative} informative and ${capped} capped groups for 4 steps of 2`);

      const steps = await storedSteps(r);
      assert.equal(steps.length, 4);
      for (const s of steps) assert.equal(s.rows.trained, 8, `step ${s.step} trained on ${s.rows.trained} samples`);

      // Positive control: zero-variance groups arose (all-right ones, and all-wrong ones with a spread that
      // normalisation would have turned into ±1 advantages) and were left out.
      const grouped = await storedOutcomes(r);
      const filtered = grouped.filter((e) => e.outcome === "filtered");
      assert.ok(filtered.length >= 2, `${filtered.length} groups left out`);
      assert.ok(
        filtered.some((e) => Math.max(...e.rewards) - Math.min(...e.rewards) > 0),
        "an all-wrong group with reward noise inside the tolerance was left out",
      );
      assert.ok(
        filtered.every((e) => e.rows === 0 && !groups.has(e.taskId)),
        "a left-out group never reached the scored stream",
      );
      // Each left-out group is replaced by a task one round deeper, which was rolled out and scored.
      const replaced = await events(r, "orchestrator", "replace");
      assert.ok(replaced.length >= 1 && replaced.length <= filtered.length, `${replaced.length} replacements for ${filtered.length} left-out groups`);
      const seen = new Map(grouped.map((e) => [e.taskId, e]));
      const replacements = [...seen.keys()].filter((t) => /~r\d+$/.test(t));
      assert.ok(replacements.length >= 1, "replacement tasks were rolled out and scored");
      for (const t of replacements) {
        const round = Number(/~r(\d+)$/.exec(t)![1]);
        assert.equal(seen.get(t)!.round, round, `${t} carries its round`);
        const parent = round === 1 ? t.replace(/~r1$/, "") : t.replace(/~r\d+$/, `~r${round - 1}`);
        assert.equal(seen.get(parent)?.outcome, "filtered", `${t} replaces ${parent}, which was left out`);
      }
      const byStepAndEnv = filtered.filter((e) => e.env === "zerovar@1.0.0");
      assert.equal(byStepAndEnv.length, filtered.length, "left-out groups name their environment");
    },
  );
});

test("positive control: without the filter zero-variance groups reach the learner, and normalisation passes an all-wrong one off as informative", async () => {
  await withZeroVarianceRun("zvoff", {}, { steps: 3, normalizeAdvantage: true }, async (r) => {
    const groups = [...(await scoredGroups(r)).values()];
    const zeroVariance = groups.filter((rows) => spread(rows) <= TOLERANCE);
    assert.ok(zeroVariance.length >= 1, "zero-variance groups were trained on");
    const inflated = zeroVariance.filter((rows) => spread(rows) > 0 && Math.max(...rows.map((x) => Math.abs(x.advantage))) >= 0.5);
    assert.ok(inflated.length >= 1, "an all-wrong group (reward noise below 1e-4) went through with advantages of ±1");
  });
});

test("an environment whose every group is zero-variance hits the replacement cap, says so, and the run still finishes", async () => {
  await withZeroVarianceRun("zvcap", { allWrong: true }, { steps: 2, filter: { zeroVariance: true, tolerance: TOLERANCE, maxRefillRounds: 1 } }, async (r) => {
    const groups = await scoredGroups(r);
    for (const [taskId, rows] of groups) {
      assert.match(taskId, /~r1$/, `${taskId} reached the learner before the cap`);
      assert.ok(rows.every((x) => x.advantage === 0 && x.reward <= ZERO_VARIANCE_NOISE * 1.01));
    }
    const steps = await storedSteps(r);
    assert.equal(steps.length, 2);
    for (const s of steps) assert.equal(s.rows.trained, 8);
    const grouped = await storedOutcomes(r);
    assert.ok(grouped.filter((e) => e.outcome === "capHit").length >= 4, "cap hits are counted");
    assert.ok(grouped.filter((e) => e.outcome === "filtered").length >= 4, "first-round groups were left out");
    assert.match(readFileSync(join(r.dir, "logs", "reward-0.log"), "utf8"), /refill cap hit/);
  });
});
