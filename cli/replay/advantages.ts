// Advantages of recorded rows under changed advantage settings (replay --set rl.advantage=rloo, ...).
// The reward actor computes them per group from its rewards with the same rule (rl/group-filter.ts) and
// rejects a whole group when one advantage is past rl.maxAbsAdvantage. Rewards are the rows' stored (float32) ones.
import type { RolloutRow } from "../../streams/index.js";
import type { AdvantageSettings } from "./settings.js";
import { recomputedAdvantages } from "../../rl/group-filter.js";
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
      const a = recomputedAdvantages(rewards, shaped, s.kind, s.zeroVarianceTolerance);
      idx.forEach((i, k) => {
        advantage[i] = a[k]!;
      });
    }
    if (idx.some((i) => Math.abs(advantage[i]!) > s.maxAbs)) rejected.add(group);
  }
  const kept = rows.flatMap((r, i) => (rejected.has(r.groupId) ? [] : [{ ...r, advantage: advantage[i]! }]));
  return { rows: kept, leftOut: rows.length - kept.length };
}
