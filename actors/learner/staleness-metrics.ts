// What the staleness bound costs, by environment and by completion length, so its bias is visible: slow
// rollouts are the long ones, and dropping stale samples takes them out first. Per step the learner counts
// rows trained, trained late (delayed: staleness > 0) and never trained (droppedStale: past
// maxOffPolicySteps), each by environment and by length quarter of rl.sampling.maxTokens (q1: at most a
// quarter of it, ... q4: over three quarters, multi-turn transcripts longer than maxTokens included).
// Fixed quarters rather than the step's own quartiles, so a bucket means the same thing at every step.
import type { RolloutRow } from "../../streams/index.js";

export const LENGTH_BUCKETS = ["q1", "q2", "q3", "q4"] as const;
export type LengthBucket = (typeof LENGTH_BUCKETS)[number];
export type StaleOutcome = "trained" | "delayed" | "droppedStale";

export function lengthBucket(completionTokens: number, maxTokens: number): LengthBucket {
  const q = completionTokens / Math.max(1, maxTokens);
  return q <= 0.25 ? "q1" : q <= 0.5 ? "q2" : q <= 0.75 ? "q3" : "q4";
}

export interface StalenessTally {
  /** Flat values for the step event: `<outcome>.env.<env>` and `<outcome>.len.<q>` (every length bucket, zeros included). */
  values: Record<string, number>;
  /** One entry per (outcome, env, length) with its count, for the Prometheus counter. */
  cells: Array<{ outcome: StaleOutcome; env: string; length: LengthBucket; count: number }>;
}

/** Counts a step's trained rows (at training version `version`) and the rows it dropped as stale. */
export function tallyStaleness(version: number, trained: RolloutRow[], dropped: RolloutRow[], maxTokens: number): StalenessTally {
  const values: Record<string, number> = {};
  for (const o of ["trained", "delayed", "droppedStale"] as const) for (const q of LENGTH_BUCKETS) values[`${o}.len.${q}`] = 0;
  const cells = new Map<string, { outcome: StaleOutcome; env: string; length: LengthBucket; count: number }>();
  const count = (outcome: StaleOutcome, row: RolloutRow) => {
    const length = lengthBucket(row.completionIds.length, maxTokens);
    values[`${outcome}.len.${length}`] = (values[`${outcome}.len.${length}`] ?? 0) + 1;
    values[`${outcome}.env.${row.env}`] = (values[`${outcome}.env.${row.env}`] ?? 0) + 1;
    const key = `${outcome}|${row.env}|${length}`;
    const cell = cells.get(key) ?? { outcome, env: row.env, length, count: 0 };
    cell.count++;
    cells.set(key, cell);
  };
  for (const row of trained) {
    count("trained", row);
    if (version - row.policyVersionMin > 0) count("delayed", row);
  }
  for (const row of dropped) count("droppedStale", row);
  return { values, cells: [...cells.values()] };
}
