// The one conversion of a rollout on its way from the environment to the learner. Inference publishes
// the environment's RolloutResult as it is (toRawRollout only makes it wire-safe); reward scores exactly
// that and turns it, with its score, into the scored Arrow row (toScoredRow). Every field the rollout
// produced survives: transcript with tool names, state, turn boundaries, rewards, metrics, errors, timings.
import type { RolloutResult } from "../environments/api/rollout.js";
import type { ScoreResult } from "../environments/api/score.js";
import type { RawRollout, Task } from "./messages.js";
import type { RolloutRow } from "./rollout-schema.js";

/** State as JSON carries it: what a reward function reads in training is what `eval` gave it. */
function jsonSafe(state: Record<string, unknown>): Record<string, unknown> {
  return JSON.parse(JSON.stringify(state ?? {})) as Record<string, unknown>;
}

export function toRawRollout(r: RolloutResult): RawRollout {
  return {
    ...r,
    completionMask: r.completionMask.map((m) => (m ? 1 : 0)),
    turnOffsets: r.turnOffsets ?? [],
    versionSpans: (r.versionSpans ?? []).map((s) => ({ ...s })),
    state: jsonSafe(r.state),
  };
}

export interface ScoredRowContext {
  task: Task;
  exampleId: string;
  score: ScoreResult;
  /** The reward trained on: score.reward, or 0 when it was not finite (the error is in score.errors). */
  reward: number;
  advantage: number;
  scoreMs: number;
}

export function toScoredRow(r: RawRollout, c: ScoredRowContext): RolloutRow {
  return {
    taskId: c.task.taskId,
    groupId: c.task.taskId,
    env: c.task.env,
    exampleId: c.exampleId,
    exampleIndex: c.task.exampleIndex,
    step: c.task.step,
    promptIds: Int32Array.from(r.promptIds),
    completionIds: Int32Array.from(r.completionIds),
    completionMask: Uint8Array.from(r.completionMask),
    samplerLogprobs: Float32Array.from(r.samplerLogprobs),
    turnOffsets: Int32Array.from(r.turnOffsets),
    messages: r.messages,
    stateJson: JSON.stringify(r.state),
    policyVersionMin: r.policyVersionMin,
    policyVersionMax: r.policyVersionMax,
    versionSpans: r.versionSpans,
    reward: c.reward,
    advantage: c.advantage,
    rewardComponents: c.score.components,
    metrics: c.score.metrics,
    errors: c.score.errors,
    isTruncated: r.isTruncated,
    stopReason: r.stopReason,
    numTurns: r.numTurns,
    generateMs: r.timings.generateMs,
    envMs: r.timings.envMs,
    scoreMs: c.scoreMs,
  };
}
