// The overlong penalty (rl.lengthPenalty) at its boundaries, counted on model tokens only, and replay's
// recomputed advantages including the penalty each row recorded (the control: without it they differ).
import { test } from "node:test";
import assert from "node:assert/strict";
import { LENGTH_PENALTY_METRIC, lengthPenalty, modelTokens } from "../../rl/length-penalty.js";
import { groupAdvantages } from "../../rl/advantages.js";
import { parseRunConfig } from "../../actors/runtime/config.js";
import { withAdvantages } from "../../cli/replay/advantages.js";
import { validRow } from "../helpers/rollout-fixtures.js";

test("no penalty up to the buffer, then linear down to -coef at the budget, never below", () => {
  const s = { coef: 0.5, buffer: 4, maxTokens: 16 };
  assert.deepEqual(
    [0, 12, 13, 14, 16, 20].map((t) => lengthPenalty(t, s)),
    [0, 0, -0.125, -0.25, -0.5, -0.5],
  );
  assert.equal(lengthPenalty(16, { ...s, coef: 0 }), 0, "coef 0 is off");
  assert.equal(modelTokens([1, 1, 0, 0, 1]), 3, "environment tokens of a multi-turn transcript are not the model's");
  const cfg = parseRunConfig({ run: "a", environments: [{ id: "arithmetic@^1" }] });
  assert.deepEqual(cfg.rl.lengthPenalty, { coef: 0, buffer: 4 }, "off by default");
});

test("replay recomputes advantages from reward + the recorded penalty", () => {
  const rewards = [1, 1, 0, 0];
  const penalties = [0, -0.5, 0, -0.25];
  const rows = rewards.map((reward, i) => validRow("g", i, { groupId: "g", reward, advantage: 0, metrics: { [LENGTH_PENALTY_METRIC]: penalties[i]! } }));
  const got = withAdvantages(rows, { kind: "mean", maxAbs: 100, recompute: true, zeroVarianceTolerance: null }).rows.map((r) => r.advantage);
  const want = groupAdvantages(
    rewards.map((r, i) => r + penalties[i]!),
    "mean",
  );
  assert.deepEqual(got, want);
  assert.notDeepEqual(got, groupAdvantages(rewards, "mean"), "the control: without the penalty the advantages differ");
});
