// What the staleness bound costs, by environment and by completion length, so its bias is visible: slow
// rollouts are the long ones, and dropping stale samples takes them out first. Per step the learner counts
// rows trained, trained late (delayed: staleness > 0) and never trained (droppedStale: past
// maxOffPolicySteps), each by environment and by length quarter of rl.sampling.maxTokens (q1: at most a
// quarter of it, ... q4: over three quarters, multi-turn transcripts longer than maxTokens included).
// Fixed quarters rather than the step's own quartiles, so a bucket means the same thing at every step.

export const LENGTH_BUCKETS = ["q1", "q2", "q3", "q4"] as const;
export type LengthBucket = (typeof LENGTH_BUCKETS)[number];
export type StaleOutcome = "trained" | "delayed" | "droppedStale";

/** What the tally needs of a row. */
export interface TalliedRow {
  env: string;
  completionIds: ArrayLike<number>;
  policyVersionMin: number;
}

export interface StalenessCell {
  outcome: StaleOutcome;
  env: string;
  length: LengthBucket;
  count: number;
}

export interface StalenessTally {
  rows: Record<StaleOutcome, number>;
  /** One entry per (outcome, env, length) that has rows. */
  cells: StalenessCell[];
}

export function lengthBucket(completionTokens: number, maxTokens: number): LengthBucket {
  const q = completionTokens / Math.max(1, maxTokens);
  return q <= 0.25 ? "q1" : q <= 0.5 ? "q2" : q <= 0.75 ? "q3" : "q4";
}

/** Counts a step's trained rows (at training version `version`) and the rows it dropped as stale. */
export function tallyStaleness(version: number, trained: readonly TalliedRow[], dropped: readonly TalliedRow[], maxTokens: number): StalenessTally {
  const rows: Record<StaleOutcome, number> = { trained: 0, delayed: 0, droppedStale: 0 };
  const cells = new Map<string, StalenessCell>();
  const count = (outcome: StaleOutcome, row: TalliedRow) => {
    rows[outcome]++;
    const length = lengthBucket(row.completionIds.length, maxTokens);
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
  return { rows, cells: [...cells.values()] };
}
