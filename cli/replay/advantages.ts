// Advantages of recorded rows under changed advantage settings (replay --set rl.advantage=rloo, ...).
// The reward actor computes them per group from its rewards with the same function (actors/runtime/
// advantages.ts) and rejects a whole group when one advantage is past rl.maxAbsAdvantage. Rewards are recomputed from the rows' stored (float32) rewards.
import type { RolloutRow } from "../../streams/index.js";
import type { AdvantageSettings } from "./settings.js";
import { groupAdvantages, isZeroVariance } from "../../rl/advantages.js";
import { LENGTH_PENALTY_METRIC } from "../../rl/length-penalty.js";

/** The step's rows with advantages under `s`, in their order; rows of rejected groups are left out. */
export function withAdvantages(rows: RolloutRow[], s: AdvantageSettings): { rows: RolloutRow[]; leftOut: number } {
  const groups = new Map<string, number[]>();
  rows.forEach((r, i) => {
    groups.set(r.groupId, [...(groups.get(r.groupId) ?? []), i]);
  });
  const advantage = rows.map((r) => r.advantage);
  const rejected = new Set<string>();
  for (const [group, idx] of groups) {
    if (s.recompute) {
      const rewards = idx.map((i) => rows[i]!.reward);
      // The reward the run's advantages were computed from: the rubric's plus its recorded length penalty.
      const shaped = idx.map((i) => rows[i]!.reward + (rows[i]!.metrics[LENGTH_PENALTY_METRIC] ?? 0));
      // As the reward actor did: a zero-variance group the run trained on (its filter's refill cap) has zero advantages.
      const a = s.zeroVarianceTolerance !== null && isZeroVariance(rewards, s.zeroVarianceTolerance) ? rewards.map(() => 0) : groupAdvantages(shaped, s.kind);
      idx.forEach((i, k) => {
        advantage[i] = a[k]!;
      });
    }
    if (idx.some((i) => Math.abs(advantage[i]!) > s.maxAbs)) rejected.add(group);
  }
  const kept = rows.flatMap((r, i) => (rejected.has(r.groupId) ? [] : [{ ...r, advantage: advantage[i]! }]));
  return { rows: kept, leftOut: rows.length - kept.length };
}
