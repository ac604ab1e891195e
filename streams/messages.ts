// zod schemas of every msgpack message on the wire. Arrow batches have their schema in rollout-schema.ts.
import { z } from "zod";

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
});
export type Task = z.infer<typeof TaskSchema>;

const MessageSchema = z.object({ role: z.enum(["system", "user", "assistant", "tool"]), content: z.string() });

export const RawRolloutSchema = z.object({
  promptIds: z.array(nonNegInt),
  completionIds: z.array(nonNegInt),
  completionMask: z.array(z.union([z.literal(0), z.literal(1)])),
  samplerLogprobs: z.array(z.number()),
  messages: z.array(MessageSchema),
  numTurns: nonNegInt,
  stopReason: z.string(),
  isTruncated: z.boolean(),
  policyVersionMin: int,
  policyVersionMax: int,
  generateMs: z.number().nonnegative(),
  envMs: z.number().nonnegative(),
}).refine((r) => r.completionMask.length === r.completionIds.length && r.samplerLogprobs.length === r.completionIds.length, {
  message: "completionMask and samplerLogprobs must have one entry per completion token",
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
