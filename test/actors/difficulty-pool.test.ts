// The difficulty-pool sampler (rl.pool) and the per-environment quotas, as pure functions: the orchestrator
// chooses with exactly these from what KV holds. Statistical checks use fixed seeds, so they are exact
// reproductions, with tolerances of four standard deviations around the rate the sampler must give.
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyGroups, chooseExample, emptyStats, inBand, MAX_SCAN, quotaEnvironment, quotaProblems } from "../../rl/difficulty-pool.js";
import { crossFieldProblems } from "../../actors/runtime/config.js";
import type { LoadedEnvironment } from "../../actors/runtime/environments.js";
import { mulberry32 } from "../helpers/rng.js";
import { lengthBucket, tallyStaleness } from "../../rl/staleness-tally.js";
import type { RolloutRow } from "../../streams/index.js";

const BAND: [number, number] = [0.1, 0.9];

/** A dataset of `size` examples, a fraction `inside` of them (spread at random) with a pass rate inside BAND. */
function statsWith(size: number, inside: number, seed: number): Record<string, [number, number]> {
  const rand = mulberry32(seed);
  const out: Record<string, [number, number]> = {};
  for (let i = 0; i < size; i++) {
    const u = rand();
    // Inside: strictly within; outside: always solved or never, and the band's edges count as inside.
    out[String(i)] = u < inside ? [3, i % 7 === 0 ? BAND[0] : 0.5] : [3, i % 2 === 0 ? 0 : 1];
  }
  return out;
}

/** Picks `n` regular tasks in a row from one environment; the fraction of picks inside the band. */
function insideFraction(stats: Record<string, [number, number]>, size: number, n: number, revisit: number, seed: number) {
  let cursor = 0,
    inside = 0,
    passedOver = 0;
  for (let index = 0; index < n; index++) {
    const c = chooseExample(stats, cursor, size, seed, index, { band: BAND, revisit });
    passedOver += c.scanned - 1;
    if (inBand(stats[String(c.position % size)], BAND)) inside++;
    cursor = c.position + 1;
  }
  return { fraction: inside / n, passedOver };
}

test("the sampler's picks fall inside the band at the rate the band and revisit give (seeded; with a positive control)", () => {
  const size = 1000,
    n = 4000,
    inside = 0.3,
    revisit = 0.1;
  const stats = statsWith(size, inside, 42);
  const f = Object.values(stats).filter((s) => inBand(s, BAND)).length / size;
  assert.ok(Math.abs(f - inside) < 0.05, `the dataset has ${f} inside`);
  // Every example inside is taken when met, one outside with probability revisit.
  const expected = f / (f + revisit * (1 - f));
  const sd = Math.sqrt((expected * (1 - expected)) / n);
  for (const seed of [1, 2, 3]) {
    const got = insideFraction(stats, size, n, revisit, seed);
    assert.ok(Math.abs(got.fraction - expected) < 4 * sd, `seed ${seed}: ${got.fraction} inside, expected ${expected.toFixed(4)} ± ${(4 * sd).toFixed(4)}`);
    assert.ok(got.passedOver > n, `seed ${seed}: ${got.passedOver} passed over`);
  }
  // Positive control: revisit 1 is a sampler blind to the band, and it gives the dataset's own share, which the
  // check above would reject.
  const blind = insideFraction(stats, size, n, 1, 1);
  assert.ok(Math.abs(blind.fraction - f) < 4 * Math.sqrt((f * (1 - f)) / n), `blind sampler: ${blind.fraction}`);
  assert.ok(Math.abs(blind.fraction - expected) > 8 * sd, "the band check tells a blind sampler apart");
  assert.equal(blind.passedOver, 0);
  // revisit 0: nothing outside the band is ever taken while something inside is met.
  assert.equal(insideFraction(stats, size, n, 0, 1).fraction, 1);
});

test("the sampler is a pure function of seed, index, cursor and stats; unseen examples count as inside", () => {
  const stats = statsWith(500, 0.5, 7);
  const a = chooseExample(stats, 123, 500, 9, 17, { band: BAND, revisit: 0.2 });
  assert.deepEqual(chooseExample(structuredClone(stats), 123, 500, 9, 17, { band: BAND, revisit: 0.2 }), a);
  const allOutside = statsWith(500, 0, 7);
  assert.notDeepEqual(
    [1, 2, 3, 4, 5, 6].map((seed) => chooseExample(allOutside, 0, 500, seed, 17, { band: BAND, revisit: 0.5 }).position),
    [1, 2, 3, 4, 5, 6].map(() => chooseExample(allOutside, 0, 500, 1, 17, { band: BAND, revisit: 0.5 }).position),
    "the seed matters",
  );
  assert.deepEqual(chooseExample(undefined, 5, Number.POSITIVE_INFINITY, 1, 1, { band: BAND, revisit: 0 }), { position: 5, scanned: 1, forced: false });
  // Every example outside the band and no revisits: the scan ends and takes the last one met, so a run goes on.
  const hopeless = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [String(i), [1, 1] as [number, number]]));
  assert.deepEqual(chooseExample(hopeless, 10, 50, 1, 1, { band: BAND, revisit: 0 }), { position: 59, scanned: 50, forced: true });
  const solved = Object.fromEntries(Array.from({ length: MAX_SCAN + 10 }, (_, i) => [String(i), [1, 1] as [number, number]]));
  const endless = chooseExample(solved, 0, Number.POSITIVE_INFINITY, 1, 1, { band: BAND, revisit: 0 });
  assert.deepEqual(endless, { position: MAX_SCAN - 1, scanned: MAX_SCAN, forced: true });
});

test("running pass rates: the first group sets it, later ones move it by decay; events applied once, in order", () => {
  let stats = applyGroups(emptyStats(), [{ seq: 3, envKey: "a", exampleIndex: 4, passRate: 1 }], 0.5);
  assert.deepEqual(stats, { seq: 4, envs: { a: { "4": [1, 1] } } });
  stats = applyGroups(
    stats,
    [
      { seq: 3, envKey: "a", exampleIndex: 4, passRate: 0 }, // applied before a restart: passed over
      { seq: 5, envKey: "a", exampleIndex: 4, passRate: 0 },
      { seq: 6, envKey: "b", exampleIndex: 4, passRate: 0.25 },
    ],
    0.5,
  );
  assert.deepEqual(stats, { seq: 7, envs: { a: { "4": [2, 0.5] }, b: { "4": [1, 0.25] } } });
});

const env = (key: string): LoadedEnvironment => ({ key, id: `${key}@1.0.0`, weight: 1, env: {} as LoadedEnvironment["env"] });

test("per-environment quotas hold in every step; the config checks them", () => {
  const envs = [env("a"), env("b"), env("c")];
  const quotas = { a: 3, b: 0, c: 1 };
  for (let step = 0; step < 50; step++) {
    const counts: Record<string, number> = {};
    for (let slot = 0; slot < 4; slot++) {
      const e = quotaEnvironment(envs, quotas, step * 4 + slot);
      counts[e.key] = (counts[e.key] ?? 0) + 1;
    }
    assert.deepEqual(counts, { a: 3, c: 1 }, `step ${step}`);
  }
  assert.deepEqual(quotaProblems(envs, { a: 1, d: 1 }), ['rl.pool.quotas.d: no environment has the key "d" (keys: a, b, c)']);
  const raw = (quotas: Record<string, number>) => ({ run: "q", environments: [{ id: "x" }], rl: { batchSize: 16, groupSize: 4, pool: { quotas } } });
  assert.deepEqual(crossFieldProblems(raw({ a: 3, c: 1 })), []);
  assert.match(
    crossFieldProblems(raw({ a: 3, c: 2 }))[0]!.message,
    /must add up to the prompts per step, rl.batchSize \/ rl.groupSize = 4 \(they add up to 5\)/,
  );
  assert.match(
    crossFieldProblems({ run: "q", environments: [{ id: "x" }], rl: { pool: { band: [0.8, 0.2] } } })[0]!.message,
    /low \(0.8\) must not exceed high/,
  );
});

test("the learner's staleness tally: by environment and length quarter of maxTokens, delayed = trained at staleness > 0", () => {
  const row = (env: string, len: number, version: number) => ({ env, completionIds: new Int32Array(len), policyVersionMin: version }) as unknown as RolloutRow;
  assert.deepEqual(
    [0, 4, 5, 8, 9, 12, 13, 40].map((n) => lengthBucket(n, 16)),
    ["q1", "q1", "q2", "q2", "q3", "q3", "q4", "q4"],
  );
  const t = tallyStaleness(5, [row("a@1", 2, 5), row("a@1", 16, 4), row("b@1", 16, 3)], [row("b@1", 16, 1)], 16);
  const sum = (pick: (c: (typeof t.cells)[number]) => boolean) => t.cells.filter(pick).reduce((n, c) => n + c.count, 0);
  assert.equal(
    sum((c) => c.outcome === "trained" && c.env === "a@1"),
    2,
  );
  assert.equal(
    sum((c) => c.outcome === "delayed" && c.env === "a@1"),
    1,
  );
  assert.equal(
    sum((c) => c.outcome === "delayed" && c.env === "b@1"),
    1,
  );
  assert.equal(
    sum((c) => c.outcome === "droppedStale" && c.env === "b@1"),
    1,
  );
  assert.deepEqual(t.rows, { trained: 3, delayed: 2, droppedStale: 1 });
  assert.deepEqual(
    ["q1", "q2", "q3", "q4"].map((q) => (["trained", "delayed", "droppedStale"] as const).map((o) => sum((c) => c.outcome === o && c.length === q))),
    [
      [1, 0, 0],
      [0, 0, 0],
      [0, 0, 0],
      [2, 2, 1],
    ],
  );
  assert.equal(
    t.cells.reduce((s, c) => s + c.count, 0),
    6,
  );
});
