// zod schemas of every msgpack message on the wire. Arrow batches have their schema in rollout-schema.ts.
import { z } from "zod";
import { chatMessageSchema } from "../environments/api/messages.js";
import { versionSpansProblem } from "./version-spans.js";

const int = z.number().int();
const nonNegInt = int.nonnegative();

export const SamplingSchema = z.object({
  temperature: z.number().nonnegative(),
  topP: z.number().gt(0).lte(1),
  topK: nonNegInt,
  maxTokens: int.positive(),
  stop: z.array(z.string()).optional(),
});

/** One prompt group to roll out: published by the orchestrator on rs.<run>.tasks. */
export const TaskSchema = z.object({
  run: z.string(),
  taskId: z.string(),
  epoch: nonNegInt,
  index: nonNegInt,
  /** The RL step this task feeds (the dispatch gate counts in these). */
  step: nonNegInt,
  /** Resolved environment, name@version. */
  env: z.string(),
  /** Key of the environment in the run config (several entries may share an env with other args). */
  envKey: z.string(),
  exampleIndex: nonNegInt,
  groupSize: int.positive(),
  sampling: SamplingSchema,
  seed: nonNegInt,
  /**
   * 0 for a task of the dataset's order; r for the r-th replacement of a group the zero-variance filter left
   * out (rl.filter). The reward actor lets a zero-variance group through, with zero advantage, once this
   * reaches rl.filter.maxRefillRounds. Absent = 0.
   */
  round: nonNegInt.optional(),
  /**
   * rl.staleness pace: the policy version the learner had when the task was dispatched. Inference does not
   * start the task on older weights (it waits for them), so the orchestrator's staleness gate counts from a
   * version the samples really have. Absent: start on whatever weights are loaded.
   */
  minPolicyVersion: nonNegInt.optional(),
});
export type Task = z.infer<typeof TaskSchema>;

// The raw rollout on the wire IS the environment's RolloutResult (environments/api/rollout.ts): the same
// fields, names and nesting, so inference publishes what the environment returned and reward scores
// exactly that, with no copy in between. `state` must be JSON-safe (it also becomes the scored row's
// state column); tool messages keep their name and call id.
export const RawRolloutSchema = z
  .object({
    promptIds: z.array(nonNegInt),
    completionIds: z.array(nonNegInt),
    completionMask: z.array(z.union([z.literal(0), z.literal(1)])),
    samplerLogprobs: z.array(z.number()),
    messages: z.array(chatMessageSchema),
    numTurns: nonNegInt,
    /** Completion-token offset of each model turn; absent in groups recorded before it existed. */
    turnOffsets: z.array(nonNegInt).default([]),
    stopReason: z.string(),
    isTruncated: z.boolean(),
    policyVersionMin: int,
    policyVersionMax: int,
    /** Which version sampled which completion tokens; absent in groups recorded before per-token versions. */
    versionSpans: z.array(z.object({ version: int, start: nonNegInt, end: nonNegInt })).default([]),
    state: z.record(z.string(), z.unknown()),
    timings: z.object({ generateMs: z.number().nonnegative(), envMs: z.number().nonnegative() }),
  })
  .refine((r) => r.completionMask.length === r.completionIds.length && r.samplerLogprobs.length === r.completionIds.length, {
    message: "completionMask and samplerLogprobs must have one entry per completion token",
  })
  .refine((r) => r.turnOffsets.every((o, k) => o <= r.completionIds.length && (k === 0 || o >= r.turnOffsets[k - 1]!)), {
    message: "turnOffsets must be non-decreasing offsets into the completion",
  })
  .superRefine((r, ctx) => {
    const why = versionSpansProblem(r.versionSpans, {
      length: r.completionIds.length,
      mask: r.completionMask,
      min: r.policyVersionMin,
      max: r.policyVersionMax,
    });
    if (why) ctx.addIssue({ code: "custom", path: ["versionSpans"], message: why });
  });
export type RawRollout = z.infer<typeof RawRolloutSchema>;

/** A task's group of rollouts, published by inference on rs.<run>.rollouts.raw. */
export const RawRolloutGroupSchema = z.object({
  task: TaskSchema,
  rollouts: z.array(RawRolloutSchema).min(1),
  producer: z.string(),
});
export type RawRolloutGroup = z.infer<typeof RawRolloutGroupSchema>;

/** Announces a new policy version on rs.<run>.weights; the weights are object `v<version>`. */
export const WeightsAnnouncementSchema = z.object({
  run: z.string(),
  version: nonNegInt,
  step: nonNegInt,
  phase: z.enum(["sft", "rl"]),
  object: z.string(),
  bytes: nonNegInt,
  sha256: z.string(),
});
export type WeightsAnnouncement = z.infer<typeof WeightsAnnouncementSchema>;

/** Announces a full training state object (weights + optimizer + positions) on rs.<run>.checkpoints. */
export const StateAnnouncementSchema = z.object({
  run: z.string(),
  step: nonNegInt,
  object: z.string(),
  bytes: nonNegInt,
  sha256: z.string(),
});
export type StateAnnouncement = z.infer<typeof StateAnnouncementSchema>;

export const RestoreRequestSchema = z.object({ run: z.string() });
export const RestoreReplySchema = z.object({
  /** -1 when there is no checkpoint on disk. */
  step: int,
  object: z.string().optional(),
  error: z.string().optional(),
});
export type RestoreReply = z.infer<typeof RestoreReplySchema>;

/** Metrics events on rs.<run>.metrics.<actor>: flat numbers plus a few labels. */
export const MetricsEventSchema = z.object({
  actor: z.string(),
  kind: z.string(),
  time: z.number(),
  step: int.optional(),
  values: z.record(z.string(), z.number()),
  labels: z.record(z.string(), z.string()).optional(),
});
export type MetricsEvent = z.infer<typeof MetricsEventSchema>;

/** One held-out evaluation sample on rs.<run>.eval (the evaluator publishes them; kind "sample"). */
export const EvalSampleSchema = z.object({
  kind: z.literal("sample"),
  run: z.string(),
  version: nonNegInt,
  env: z.string(),
  /** The held-out split the example is from; absent = "eval" (the split that follows train's distribution). */
  split: z.string().optional(),
  exampleId: z.string(),
  sampleIndex: nonNegInt,
  greedy: z.boolean(),
  messages: z.array(chatMessageSchema),
  reward: z.number(),
  components: z.record(z.string(), z.number()),
  metrics: z.record(z.string(), z.number()),
  errors: z.array(z.string()),
  stopReason: z.string(),
  completionTokens: nonNegInt,
});

/** The summary of one policy version's evaluation on one environment (kind "result"). */
export const EvalResultSchema = z.object({
  kind: z.literal("result"),
  run: z.string(),
  version: nonNegInt,
  env: z.string(),
  /** As on a sample: absent = "eval"; another split (e.g. "hard") is a result of its own. */
  split: z.string().optional(),
  n: nonNegInt,
  passAt1: z.number(),
  passAtK: z.record(z.string(), z.number()),
  rewardMean: z.number(),
  rewardStd: z.number(),
  completionTokensMean: z.number(),
  stopReasons: z.record(z.string(), nonNegInt),
  seconds: z.number().nonnegative(),
});

export const EvalMessageSchema = z.discriminatedUnion("kind", [EvalSampleSchema, EvalResultSchema]);
export type EvalMessage = z.infer<typeof EvalMessageSchema>;
