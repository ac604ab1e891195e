// Valid records of the tiny arithmetic run the integration tests use: tests that corrupt or publish
// messages by hand start from these and change one thing.
import type { RawRollout, RolloutRow, Task } from "../../streams/index.js";

export const testSampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 4 };

/** A task of run `run` for the arithmetic env (key "arithmetic"), msg-id `<run>:<epoch>:<label>`. */
export function arithmeticTask(run: string, epoch: number, label: string, groupSize: number): Task {
  return {
    run,
    taskId: `${run}:${epoch}:${label}`,
    epoch,
    index: 0,
    step: 0,
    env: "arithmetic@1.0.0",
    envKey: "arithmetic",
    exampleIndex: 0,
    groupSize,
    sampling: testSampling,
    seed: 1,
  };
}

export function validRollout(edit: Partial<RawRollout> = {}): RawRollout {
  return {
    promptIds: [257, 260, 49, 43, 50, 263, 261],
    completionIds: [51, 263],
    completionMask: [1, 1],
    samplerLogprobs: [-5.6, -5.6],
    messages: [
      { role: "user", content: "1+2" },
      { role: "assistant", content: "3" },
    ],
    numTurns: 1,
    turnOffsets: [0],
    stopReason: "eos",
    isTruncated: false,
    policyVersionMin: 0,
    policyVersionMax: 0,
    versionSpans: [{ version: 0, start: 0, end: 2 }],
    state: {},
    timings: { generateMs: 1, envMs: 0 },
    ...edit,
  };
}

export function validRow(tag: string, i: number, edit: Partial<RolloutRow> = {}): RolloutRow {
  return {
    taskId: tag,
    groupId: tag,
    env: "arithmetic@1.0.0",
    exampleId: `${tag}-${i}`,
    exampleIndex: i,
    step: 0,
    promptIds: Int32Array.from([257, 260, 49, 43, 50, 263, 261]),
    completionIds: Int32Array.from([51, 263]),
    completionMask: Uint8Array.from([1, 1]),
    samplerLogprobs: Float32Array.from([-5.6, -5.6]),
    turnOffsets: Int32Array.from([0]),
    messages: [],
    stateJson: "{}",
    policyVersionMin: 0,
    policyVersionMax: 0,
    versionSpans: [],
    reward: i % 2,
    advantage: (i % 2) - 0.5,
    rewardComponents: { correct: i % 2 },
    metrics: {},
    errors: [],
    isTruncated: false,
    stopReason: "eos",
    numTurns: 1,
    generateMs: 1,
    envMs: 0,
    scoreMs: 1,
    ...edit,
  };
}
