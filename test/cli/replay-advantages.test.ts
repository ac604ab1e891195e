// replay --set recomputes advantages as the reward actor made them: a group within the zero-variance
// filter's tolerance that the run trained on (past the refill cap) keeps zero advantages, while a group
// with a real spread gets new ones. The control: without the run's filter, the same near-tied group gets
// large normalized advantages — what the rule prevents.
import { test } from "node:test";
import assert from "node:assert/strict";
import { withAdvantages } from "../../cli/replay/advantages.js";
import { validRow } from "../helpers/rollout-fixtures.js";

const group = (id: string, rewards: number[]) => rewards.map((reward, i) => validRow(id, i, { groupId: id, reward, advantage: 0 }));

test("a near-tied group trained past the filter's cap keeps zero advantages under --set; a mixed group is recomputed", () => {
  const rows = [...group("tied", [0, 1e-4, 0, 0]), ...group("mixed", [1, 0, 1, 0])];
  const settings = { kind: "mean_std" as const, maxAbs: 100, recompute: true };
  const withRule = withAdvantages(rows, { ...settings, zeroVarianceTolerance: 1e-3 }).rows;
  assert.deepEqual(
    withRule.filter((r) => r.groupId === "tied").map((r) => r.advantage),
    [0, 0, 0, 0],
  );
  const mixed = withRule.filter((r) => r.groupId === "mixed").map((r) => r.advantage);
  assert.ok(
    mixed.every((a) => Math.abs(Math.abs(a) - 1) < 1e-3),
    `normalized ±1: ${mixed}`,
  );
  const control = withAdvantages(rows, { ...settings, zeroVarianceTolerance: null }).rows.filter((r) => r.groupId === "tied");
  assert.ok(
    control.some((r) => Math.abs(r.advantage) > 1),
    `without the rule the tie is blown up: ${control.map((r) => r.advantage)}`,
  );
});
