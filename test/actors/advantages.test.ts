// The advantage estimators against their definitions computed the slow way, and the config rule that keeps
// the older normalizeAdvantage switch from contradicting rl.advantage.
import { test } from "node:test";
import assert from "node:assert/strict";
import { groupAdvantages } from "../../rl/advantages.js";
import { advantageKindOf, parseRunConfig } from "../../actors/runtime/config.js";

const close = (a: number[], b: number[]) => a.length === b.length && a.every((x, i) => Math.abs(x - b[i]!) < 1e-12);
const rewards = [1, 0, 0.5, 1, 0, 0.25];
const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;

test("mean: r - group mean; mean_std: divided by the group std; rloo: r - the mean of the others", () => {
  const m = mean(rewards);
  assert.ok(
    close(
      groupAdvantages(rewards, "mean"),
      rewards.map((r) => r - m),
    ),
  );
  const sd = Math.sqrt(mean(rewards.map((r) => (r - m) ** 2)));
  assert.ok(
    close(
      groupAdvantages(rewards, "mean_std"),
      rewards.map((r) => (r - m) / sd),
    ),
  );
  const leaveOneOut = rewards.map((r, i) => r - mean(rewards.filter((_, j) => j !== i)));
  assert.ok(close(groupAdvantages(rewards, "rloo"), leaveOneOut), `${groupAdvantages(rewards, "rloo")} vs ${leaveOneOut}`);
  // The control: the three differ on this group (a test comparing an estimator with itself could not fail).
  assert.ok(!close(groupAdvantages(rewards, "rloo"), groupAdvantages(rewards, "mean")));
  // The older boolean form still means what it meant.
  assert.ok(close(groupAdvantages(rewards, true), groupAdvantages(rewards, "mean_std")));
  assert.ok(close(groupAdvantages(rewards, false), groupAdvantages(rewards, "mean")));
});

test("edge cases: a tied group and a group of one get zeros", () => {
  for (const kind of ["mean", "mean_std", "rloo"] as const) {
    assert.deepEqual(groupAdvantages([1, 1, 1], kind), [0, 0, 0]);
    assert.deepEqual(groupAdvantages([0.7], kind), [0]);
    assert.deepEqual(groupAdvantages([], kind), []);
  }
});

test("rl.advantage in the config; normalizeAdvantage: true means mean_std and cannot contradict it", () => {
  const base = { run: "a", environments: [{ id: "arithmetic@^1" }] };
  assert.equal(advantageKindOf(parseRunConfig(base).rl), "mean");
  assert.equal(advantageKindOf(parseRunConfig({ ...base, rl: { advantage: "rloo" } }).rl), "rloo");
  assert.equal(advantageKindOf(parseRunConfig({ ...base, rl: { normalizeAdvantage: true } }).rl), "mean_std");
  assert.throws(() => parseRunConfig({ ...base, rl: { normalizeAdvantage: true, advantage: "rloo" } }), /contradicts rl\.advantage: rloo/);
  assert.throws(() => parseRunConfig({ ...base, rl: { advantage: "gae" } }), /advantage/);
});
