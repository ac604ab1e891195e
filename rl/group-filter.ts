// The zero-variance filter (rl.filter) and a group's advantages. A group whose kept completions all scored
// the same carries no signal: it is left out ("filtered") and the orchestrator dispatches a replacement (round
// + 1), until rl.filter.maxRefillRounds, past which it is trained on with advantages of exactly zero
// ("capHit"), so a step is never starved and an uninformative group is never passed off as informative.
// Judged on the rubric's rewards, never on the shaped ones (rl.lengthPenalty shapes the advantages only).
import { groupAdvantages, isZeroVariance, type AdvantageKind } from "./advantages.js";

export interface FilterSettings {
  zeroVariance: boolean;
  tolerance: number;
  maxRefillRounds: number;
}

export type GroupVerdict = "scored" | "filtered" | "capHit";

/** What happens to a group of round `round` whose trained-on completions have `rewards`. */
export function judgeGroup(rewards: readonly number[], round: number, f: FilterSettings): GroupVerdict {
  if (!f.zeroVariance || !isZeroVariance(rewards, f.tolerance)) return "scored";
  return round < f.maxRefillRounds ? "filtered" : "capHit";
}

/** Advantages of the trained-on completions: relative to the group's shaped rewards, zero for a group the filter judged uninformative. */
export function advantagesFor(verdict: GroupVerdict, shapedRewards: readonly number[], kind: AdvantageKind): number[] {
  return verdict === "scored" ? groupAdvantages([...shapedRewards], kind) : shapedRewards.map(() => 0);
}

/** Share of rewards that count as a pass (>= 1, within float noise): what the difficulty pools keep per example. */
export function passRate(rewards: readonly number[]): number {
  return rewards.length === 0 ? 0 : rewards.filter((r) => r >= 1 - 1e-6).length / rewards.length;
}

/**
 * The task id of round `round`'s replacement for a left-out group: the original id with the round appended, never
 * the new prompt's position (which moves with the refill count), so a replacement sent again after a restart has
 * the same msg-id and is stored once.
 */
export function replacementTaskId(taskId: string, round: number): string {
  return `${taskId.replace(/~r\d+$/, "")}~r${round}`;
}

/**
 * The advantages of a group the learner trained on, recomputed from its recorded rewards (replay under changed
 * settings): with the filter on, a zero-variance group can only have been trained past the refill cap, so its
 * advantages are zero, as the reward actor gave them.
 */
export function recomputedAdvantages(rewards: readonly number[], shapedRewards: readonly number[], kind: AdvantageKind, zeroVarianceTolerance: number | null): number[] {
  const capped = zeroVarianceTolerance !== null && isZeroVariance(rewards, zeroVarianceTolerance);
  return advantagesFor(capped ? "capHit" : "scored", shapedRewards, kind);
}
