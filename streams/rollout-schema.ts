// The Arrow schema of a scored rollout batch (rs.<run>.rollouts.scored), one row per completion.
// Bump ROLLOUT_SCHEMA_VERSION on ANY change to columns or types: the decoder rejects other versions
// rather than guessing, so a replay of an old run fails loudly instead of training on misread columns.
// Older versions this reader still understands are listed in ROLLOUT_SCHEMA_VERSIONS_READ, with their
// column lists (ROLLOUT_FIELDS_V1, ...): the decoder fills the columns they lack with empty values.
import type { VersionSpan } from "./version-spans.js";
import { Bool, Dictionary, Field, Float32, Float64, Int32, List, Map_, Schema, Struct, Uint8, Utf8, type DataType } from "apache-arrow";

/**
 * Version history:
 * - 1: tokens, rewards, stop reason, turns, generate/score timings.
 * - 2: + example_index, turn_offsets, metrics, env_ms, messages, state, errors (everything the rollout
 *   produced survives to the row).
 * - 3: + policy_versions, the version that sampled each completion token as spans (weights that change
 *   between decode steps sample one completion under several versions).
 */
export const ROLLOUT_SCHEMA_VERSION = 3;
/** Versions decodeRolloutBatch accepts, oldest first; it writes only ROLLOUT_SCHEMA_VERSION. */
export const ROLLOUT_SCHEMA_VERSIONS_READ: readonly number[] = [1, 2, 3];

export type RolloutMessageRole = "system" | "user" | "assistant" | "tool";
export const ROLLOUT_MESSAGE_ROLES: readonly RolloutMessageRole[] = ["system", "user", "assistant", "tool"];

/**
 * One transcript message (environments/api ChatMessage). On the wire an absent name/toolCallId is "",
 * so "" and absent are the same thing: both decode as absent.
 */
export interface RolloutMessage {
  role: RolloutMessageRole;
  content: string;
  /** Tool name for role "tool". */
  name?: string;
  toolCallId?: string;
}

/** One scored completion. Token arrays decoded from the wire may be views into the message buffer. */
export interface RolloutRow {
  taskId: string;
  groupId: string;
  /** "name@version" of the environment. */
  env: string;
  exampleId: string;
  /** Row index of the example in the environment's dataset (Task.exampleIndex). 0 in version-1 batches. */
  exampleIndex: number;
  promptIds: Int32Array;
  completionIds: Int32Array;
  /** 1 = model-sampled token trained on; env/tool tokens 0. Same length as completionIds. */
  completionMask: Uint8Array;
  /** Sampler's per-token logprobs. Same length as completionIds. */
  samplerLogprobs: Float32Array;
  /**
   * Completion-token offset at which each model turn starts: non-decreasing, each in
   * [0, completionIds.length]. Empty in version-1 batches.
   */
  turnOffsets: Int32Array;
  policyVersionMin: number;
  policyVersionMax: number;
  /**
   * The version that sampled each completion token: spans [start, end) in order, every mask-1 token in one,
   * versions from policyVersionMin to policyVersionMax. Empty: not recorded (batches before version 3).
   */
  versionSpans: VersionSpan[];
  /** Stored as Float32: decoded values are Math.fround of what was encoded. */
  reward: number;
  advantage: number;
  /** Per-rubric rewards (Float32 on the wire), key order kept. */
  rewardComponents: Record<string, number>;
  /** Rubric metrics (zero-weight functions and state.metrics), Float64 on the wire, key order kept. */
  metrics: Record<string, number>;
  isTruncated: boolean;
  stopReason: string;
  numTurns: number;
  generateMs: number;
  /** Time spent in environment code during the rollout. */
  envMs: number;
  scoreMs: number;
  /** The dispatch step the task belonged to. */
  step: number;
  /** The full transcript, prompt messages included. */
  messages: RolloutMessage[];
  /** The rollout's environment state, JSON.stringify'd; must parse to a JSON object. */
  stateJson: string;
  /** Scoring / rollout errors, in the order they happened. */
  errors: string[];
}

/** Batch-level facts, carried as the Arrow schema's custom metadata (all strings on the wire). */
export interface RolloutBatchMeta {
  run: string;
  schemaVersion: number;
  producer: string;
  createdAt: string;
  [k: string]: string | number;
}

/** What encodeRolloutBatch accepts: schemaVersion is filled in by the codec (and must match if given). */
export interface RolloutBatchMetaInput {
  run: string;
  producer: string;
  createdAt: string;
  schemaVersion?: number;
  [k: string]: string | number | undefined;
}

/** Metadata keys the codec owns; user metadata may not start with this prefix. */
export const RESERVED_META_PREFIX = "rs.";
/** Row count of the batch: catches a stream cut at a message boundary, which Arrow reads as "fewer rows". */
export const META_ROWS_KEY = "rs.rows";
/** Comma-separated names of keys whose values were numbers, so the decoder gives numbers back. */
export const META_NUMERIC_KEYS_KEY = "rs.numeric";

// Field names follow DESIGN §3 (snake_case) so `rollstream inspect`, pyarrow and DuckDB users see the
// documented names. Every column is non-nullable: a missing value on the wire is a producer bug.
export const Col = {
  taskId: "task_id",
  groupId: "group_id",
  env: "env",
  exampleId: "example_id",
  exampleIndex: "example_index",
  promptIds: "prompt_ids",
  completionIds: "completion_ids",
  completionMask: "completion_mask",
  samplerLogprobs: "sampler_logprobs",
  turnOffsets: "turn_offsets",
  policyVersionMin: "policy_version_min",
  policyVersionMax: "policy_version_max",
  versionSpans: "policy_versions",
  reward: "reward",
  advantage: "advantage",
  rewardComponents: "reward_components",
  metrics: "metrics",
  isTruncated: "is_truncated",
  stopReason: "stop_reason",
  numTurns: "num_turns",
  generateMs: "generate_ms",
  envMs: "env_ms",
  scoreMs: "score_ms",
  step: "step",
  messages: "messages",
  stateJson: "state",
  errors: "errors",
} as const satisfies Record<keyof RolloutRow, string>;

const listOf = (t: DataType) => new List(new Field("item", t, false));
// Map<Utf8, V> as pyarrow writes it (entries struct of key/value, keys unsorted).
const mapOf = <V extends DataType>(value: V) =>
  new Map_<Utf8, V>(
    new Field("entries", new Struct<{ key: Utf8; value: V }>([new Field("key", new Utf8(), false), new Field("value", value, false)]), false),
    false,
  );

/** Field names of a `messages` struct, in wire order (snake_case like the columns). */
export const MessageCol = { role: "role", content: "content", name: "name", toolCallId: "tool_call_id" } as const satisfies Record<
  keyof RolloutMessage,
  string
>;
const messageStruct = new Struct<{ role: Utf8; content: Utf8; name: Utf8; tool_call_id: Utf8 }>([
  new Field(MessageCol.role, new Utf8(), false),
  new Field(MessageCol.content, new Utf8(), false),
  new Field(MessageCol.name, new Utf8(), false),
  new Field(MessageCol.toolCallId, new Utf8(), false),
]);

/** Field names of a `policy_versions` span struct, in wire order. */
export const SpanCol = { version: "version", start: "start", end: "end" } as const satisfies Record<keyof VersionSpan, string>;
const spanStruct = new Struct<{ version: Int32; start: Int32; end: Int32 }>([
  new Field(SpanCol.version, new Int32(), false),
  new Field(SpanCol.start, new Int32(), false),
  new Field(SpanCol.end, new Int32(), false),
]);

export const rolloutTypes = {
  utf8: new Utf8(),
  int32: new Int32(),
  float32: new Float32(),
  float64: new Float64(),
  bool: new Bool(),
  listInt32: listOf(new Int32()),
  listUint8: listOf(new Uint8()),
  listFloat32: listOf(new Float32()),
  listUtf8: listOf(new Utf8()),
  // Map<Utf8, Float32> round-trips through apache-arrow 21 IPC (tested) and is what pyarrow shows as a map.
  rewardComponents: mapOf(new Float32()),
  // Metrics are diagnostics, not training inputs: Float64 keeps whatever the rubric computed.
  metrics: mapOf(new Float64()),
  // List<Struct<role, content, name, tool_call_id>>: a list of records in pyarrow/DuckDB. Plain Utf8
  // roles (not a dictionary): a nested dictionary is poorly supported by readers and saves ~8 bytes a message.
  messageStruct,
  messages: listOf(messageStruct),
  // List<Struct<version, start, end>>: SGLang's weight-version spans, a list of records in pyarrow/DuckDB.
  spanStruct,
  versionSpans: listOf(spanStruct),
  // A handful of distinct stop reasons per batch: dictionary-encoding them costs one Int32 per row.
  // The id is fixed: a batch holds exactly one dictionary.
  stopReason: new Dictionary(new Utf8(), new Int32(), 0, false),
} as const;

/** Columns in wire order with their types (version ROLLOUT_SCHEMA_VERSION). */
export const ROLLOUT_FIELDS: readonly Field[] = [
  new Field(Col.taskId, rolloutTypes.utf8, false),
  new Field(Col.groupId, rolloutTypes.utf8, false),
  new Field(Col.env, rolloutTypes.utf8, false),
  new Field(Col.exampleId, rolloutTypes.utf8, false),
  new Field(Col.exampleIndex, rolloutTypes.int32, false),
  new Field(Col.promptIds, rolloutTypes.listInt32, false),
  new Field(Col.completionIds, rolloutTypes.listInt32, false),
  new Field(Col.completionMask, rolloutTypes.listUint8, false),
  new Field(Col.samplerLogprobs, rolloutTypes.listFloat32, false),
  new Field(Col.turnOffsets, rolloutTypes.listInt32, false),
  new Field(Col.policyVersionMin, rolloutTypes.int32, false),
  new Field(Col.policyVersionMax, rolloutTypes.int32, false),
  new Field(Col.versionSpans, rolloutTypes.versionSpans, false),
  new Field(Col.reward, rolloutTypes.float32, false),
  new Field(Col.advantage, rolloutTypes.float32, false),
  new Field(Col.rewardComponents, rolloutTypes.rewardComponents, false),
  new Field(Col.metrics, rolloutTypes.metrics, false),
  new Field(Col.isTruncated, rolloutTypes.bool, false),
  new Field(Col.stopReason, rolloutTypes.stopReason, false),
  new Field(Col.numTurns, rolloutTypes.int32, false),
  // Float64: milliseconds of long multi-turn rollouts need more than Float32's 7 digits.
  new Field(Col.generateMs, rolloutTypes.float64, false),
  new Field(Col.envMs, rolloutTypes.float64, false),
  new Field(Col.scoreMs, rolloutTypes.float64, false),
  new Field(Col.step, rolloutTypes.int32, false),
  // The variable-size text last: a reader scanning the numeric columns never touches them.
  new Field(Col.messages, rolloutTypes.messages, false),
  new Field(Col.stateJson, rolloutTypes.utf8, false),
  new Field(Col.errors, rolloutTypes.listUtf8, false),
];

/**
 * Columns of a version-2 batch, in its wire order. Frozen: never edit; a change to the columns is a new version.
 */
export const ROLLOUT_FIELDS_V2: readonly Field[] = [
  new Field(Col.taskId, rolloutTypes.utf8, false),
  new Field(Col.groupId, rolloutTypes.utf8, false),
  new Field(Col.env, rolloutTypes.utf8, false),
  new Field(Col.exampleId, rolloutTypes.utf8, false),
  new Field(Col.exampleIndex, rolloutTypes.int32, false),
  new Field(Col.promptIds, rolloutTypes.listInt32, false),
  new Field(Col.completionIds, rolloutTypes.listInt32, false),
  new Field(Col.completionMask, rolloutTypes.listUint8, false),
  new Field(Col.samplerLogprobs, rolloutTypes.listFloat32, false),
  new Field(Col.turnOffsets, rolloutTypes.listInt32, false),
  new Field(Col.policyVersionMin, rolloutTypes.int32, false),
  new Field(Col.policyVersionMax, rolloutTypes.int32, false),
  new Field(Col.reward, rolloutTypes.float32, false),
  new Field(Col.advantage, rolloutTypes.float32, false),
  new Field(Col.rewardComponents, rolloutTypes.rewardComponents, false),
  new Field(Col.metrics, rolloutTypes.metrics, false),
  new Field(Col.isTruncated, rolloutTypes.bool, false),
  new Field(Col.stopReason, rolloutTypes.stopReason, false),
  new Field(Col.numTurns, rolloutTypes.int32, false),
  // Float64: milliseconds of long multi-turn rollouts need more than Float32's 7 digits.
  new Field(Col.generateMs, rolloutTypes.float64, false),
  new Field(Col.envMs, rolloutTypes.float64, false),
  new Field(Col.scoreMs, rolloutTypes.float64, false),
  new Field(Col.step, rolloutTypes.int32, false),
  // The variable-size text last: a reader scanning the numeric columns never touches them.
  new Field(Col.messages, rolloutTypes.messages, false),
  new Field(Col.stateJson, rolloutTypes.utf8, false),
  new Field(Col.errors, rolloutTypes.listUtf8, false),
];

/**
 * Columns of a version-1 batch, in its wire order. Frozen: never edit (the test decodes bytes written
 * by the version-1 encoder); a change to the columns is a new version.
 */
export const ROLLOUT_FIELDS_V1: readonly Field[] = [
  new Field(Col.taskId, rolloutTypes.utf8, false),
  new Field(Col.groupId, rolloutTypes.utf8, false),
  new Field(Col.env, rolloutTypes.utf8, false),
  new Field(Col.exampleId, rolloutTypes.utf8, false),
  new Field(Col.promptIds, rolloutTypes.listInt32, false),
  new Field(Col.completionIds, rolloutTypes.listInt32, false),
  new Field(Col.completionMask, rolloutTypes.listUint8, false),
  new Field(Col.samplerLogprobs, rolloutTypes.listFloat32, false),
  new Field(Col.policyVersionMin, rolloutTypes.int32, false),
  new Field(Col.policyVersionMax, rolloutTypes.int32, false),
  new Field(Col.reward, rolloutTypes.float32, false),
  new Field(Col.advantage, rolloutTypes.float32, false),
  new Field(Col.rewardComponents, rolloutTypes.rewardComponents, false),
  new Field(Col.isTruncated, rolloutTypes.bool, false),
  new Field(Col.stopReason, rolloutTypes.stopReason, false),
  new Field(Col.numTurns, rolloutTypes.int32, false),
  new Field(Col.generateMs, rolloutTypes.float64, false),
  new Field(Col.scoreMs, rolloutTypes.float64, false),
  new Field(Col.step, rolloutTypes.int32, false),
];

/** The columns a batch of `version` has, or undefined for a version this reader cannot read. */
export function rolloutFieldsOf(version: number): readonly Field[] | undefined {
  if (version === ROLLOUT_SCHEMA_VERSION) return ROLLOUT_FIELDS;
  if (version === 2) return ROLLOUT_FIELDS_V2;
  if (version === 1) return ROLLOUT_FIELDS_V1;
  return undefined;
}

export function rolloutSchema(metadata: Map<string, string>): Schema {
  return new Schema([...ROLLOUT_FIELDS], metadata);
}

/** Human-readable type of a column, e.g. for error messages and `rollstream inspect`. */
export function describeRolloutSchema(fields: readonly Field[] = ROLLOUT_FIELDS): string {
  return fields.map((f) => `${f.name}: ${String(f.type)}`).join(", ");
}
