// Group-relative advantages (DESIGN §4), one estimator per name over a group's rewards. Shared by the reward
// actor (which computes them) and replay (which recomputes them under changed settings).
//   mean      A_i = r_i - mean(r)
//   mean_std  A_i = (r_i - mean(r)) / std(r)   (GRPO; a group with std ~0 keeps zeros, never divides by ~0)
//   rloo      A_i = r_i - mean_{j != i}(r_j) = n / (n - 1) * (r_i - mean(r))   (leave-one-out: the baseline of
//             sample i does not contain r_i, so it is unbiased; a group of one has no baseline and gets 0)
export type AdvantageKind = "mean" | "mean_std" | "rloo";

export function groupAdvantages(rewards: number[], kind: AdvantageKind | boolean): number[] {
  const k: AdvantageKind = kind === true ? "mean_std" : kind === false ? "mean" : kind;
  const n = rewards.length;
  if (n === 0) return [];
  const mean = rewards.reduce((s, r) => s + r, 0) / n;
  const centred = rewards.map((r) => r - mean);
  if (k === "mean") return centred;
  if (k === "rloo") return n < 2 ? centred.map(() => 0) : centred.map((c) => (c * n) / (n - 1));
  const std = Math.sqrt(centred.reduce((s, c) => s + c * c, 0) / n);
  // A group where everyone scored the same carries no signal: keep zeros rather than dividing by ~0.
  return std < 1e-6 ? centred.map(() => 0) : centred.map((c) => c / std);
}

/**
 * Whether a group carries no signal: every reward within `tolerance` of every other (a group of all-wrong or
 * all-right completions). Judged on the raw rewards, never on advantages, which normalisation can inflate:
 * an all-wrong group with rewards [0, 0, 0, 1e-9] is not made informative by dividing by its std. A group with
 * fewer than two completions has nothing to compare and is zero-variance too.
 */
export function isZeroVariance(rewards: readonly number[], tolerance: number): boolean {
  if (rewards.length < 2) return true;
  return Math.max(...rewards) - Math.min(...rewards) <= tolerance;
}
