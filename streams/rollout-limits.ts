// Semantic checks of a rollout against the run it claims to belong to: the schema says a token id is a
// non-negative integer, this says it is inside the model's vocabulary; likewise the length against the
// context the learner trains on, policy versions against the newest one that exists, and advantages
// against the run's bound. A rollout that fails is the message's fault: it is dead-lettered with the
// reason (its category first, so dead letters can be counted per reason) and the run goes on.
import { PoisonMessageError } from "./dead-letter.js";

export interface RolloutLimits {
  /** Token ids must be below this (the model's embedding rows). */
  vocabSize: number;
  /** prompt + completion tokens the learner can train on (maxPositionEmbeddings). */
  contextTokens: number;
  /** The newest policy version that exists: a rollout cannot have been sampled from a later one. */
  maxPolicyVersion: number;
  /** |advantage| above this is a producer bug or an attack, never a learning signal. */
  maxAbsAdvantage: number;
}

export const REJECT_REASONS = ["vocab", "context", "future_version", "version_order", "advantage", "group", "text", "trace"] as const;
/**
 * Why else a message is set aside: a task outside the run's limits (task, streams/task-limits.ts), it broke a
 * training step (kernel), or its actor kept dying on it (crash_loop).
 */
export const DEAD_LETTER_REASONS = [...REJECT_REASONS, "task", "kernel", "crash_loop"] as const;
export type RejectReason = (typeof REJECT_REASONS)[number];

/** The reason category of a dead letter's error text ("invalid" for schema and decode failures). */
export function rejectReasonOf(error: string): (typeof DEAD_LETTER_REASONS)[number] | "invalid" {
  const m = /^(\w+): /.exec(error);
  return m && (DEAD_LETTER_REASONS as readonly string[]).includes(m[1]!) ? (m[1] as RejectReason) : "invalid";
}

export class RolloutRejectedError extends PoisonMessageError {
  constructor(
    readonly reason: RejectReason,
    message: string,
  ) {
    super(`${reason}: ${message}`);
    this.name = "RolloutRejectedError";
  }
}

function maxOf(ids: ArrayLike<number>): number {
  let m = -1;
  for (let i = 0; i < ids.length; i++) if (ids[i]! > m) m = ids[i]!;
  return m;
}

export interface LimitedRollout {
  promptIds: ArrayLike<number>;
  completionIds: ArrayLike<number>;
  policyVersionMin: number;
  policyVersionMax: number;
  advantage?: number;
}

/** Throws RolloutRejectedError naming the rollout (`what`) and the first limit it breaks. */
export function checkRolloutLimits(r: LimitedRollout, limits: RolloutLimits, what: string): void {
  const top = Math.max(maxOf(r.promptIds), maxOf(r.completionIds));
  if (top >= limits.vocabSize) throw new RolloutRejectedError("vocab", `${what} has token id ${top}, outside the model's vocabulary [0, ${limits.vocabSize})`);
  const len = r.promptIds.length + r.completionIds.length;
  if (len > limits.contextTokens) {
    throw new RolloutRejectedError(
      "context",
      `${what} has ${len} tokens (${r.promptIds.length} prompt + ${r.completionIds.length} completion), more than the ${limits.contextTokens}-token context`,
    );
  }
  if (r.policyVersionMin > r.policyVersionMax)
    throw new RolloutRejectedError("version_order", `${what} has policy versions ${r.policyVersionMin}..${r.policyVersionMax}`);
  if (r.policyVersionMax > limits.maxPolicyVersion) {
    throw new RolloutRejectedError("future_version", `${what} claims policy version ${r.policyVersionMax}, but the newest is ${limits.maxPolicyVersion}`);
  }
  if (r.advantage !== undefined) checkAdvantage(r.advantage, limits, what);
}

/** The advantage bound alone (for a producer that checked the rest before it computed advantages). */
export function checkAdvantage(advantage: number, limits: Pick<RolloutLimits, "maxAbsAdvantage">, what: string): void {
  if (!(Math.abs(advantage) <= limits.maxAbsAdvantage)) {
    throw new RolloutRejectedError("advantage", `${what} has advantage ${advantage}, beyond rl.maxAbsAdvantage ${limits.maxAbsAdvantage}`);
  }
}
