// The Arrow schema of a scored rollout batch (rs.<run>.rollouts.scored), one row per completion.
// Bump ROLLOUT_SCHEMA_VERSION on ANY change to columns or types: the decoder rejects other versions
// rather than guessing, so a replay of an old run fails loudly instead of training on misread columns.
import {
  Bool,
  Dictionary,
  Field,
  Float32,
  Float64,
  Int32,
  List,
  Map_,
  Schema,
  Struct,
  Uint8,
  Utf8,
  type DataType,
} from "apache-arrow";

export const ROLLOUT_SCHEMA_VERSION = 1;

/** One scored completion. Token arrays decoded from the wire may be views into the message buffer. */
export interface RolloutRow {
  taskId: string;
  groupId: string;
  /** "name@version" of the environment. */
  env: string;
  exampleId: string;
  promptIds: Int32Array;
  completionIds: Int32Array;
  /** 1 = model-sampled token trained on; env/tool tokens 0. Same length as completionIds. */
  completionMask: Uint8Array;
  /** Sampler's per-token logprobs. Same length as completionIds. */
  samplerLogprobs: Float32Array;
  policyVersionMin: number;
  policyVersionMax: number;
  /** Stored as Float32: decoded values are Math.fround of what was encoded. */
  reward: number;
  advantage: number;
  /** Per-rubric rewards (Float32 on the wire), key order kept. */
  rewardComponents: Record<string, number>;
  isTruncated: boolean;
  stopReason: string;
  numTurns: number;
  generateMs: number;
  scoreMs: number;
  /** The dispatch step the task belonged to. */
  step: number;
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
  promptIds: "prompt_ids",
  completionIds: "completion_ids",
  completionMask: "completion_mask",
  samplerLogprobs: "sampler_logprobs",
  policyVersionMin: "policy_version_min",
  policyVersionMax: "policy_version_max",
  reward: "reward",
  advantage: "advantage",
  rewardComponents: "reward_components",
  isTruncated: "is_truncated",
  stopReason: "stop_reason",
  numTurns: "num_turns",
  generateMs: "generate_ms",
  scoreMs: "score_ms",
  step: "step",
} as const satisfies Record<keyof RolloutRow, string>;

const listOf = (t: DataType) => new List(new Field("item", t, false));

export const rolloutTypes = {
  utf8: new Utf8(),
  int32: new Int32(),
  float32: new Float32(),
  float64: new Float64(),
  bool: new Bool(),
  listInt32: listOf(new Int32()),
  listUint8: listOf(new Uint8()),
  listFloat32: listOf(new Float32()),
  // Map<Utf8, Float32> round-trips through apache-arrow 21 IPC (tested) and is what pyarrow shows as a map.
  rewardComponents: new Map_<Utf8, Float32>(
    new Field(
      "entries",
      new Struct<{ key: Utf8; value: Float32 }>([new Field("key", new Utf8(), false), new Field("value", new Float32(), false)]),
      false,
    ),
    false,
  ),
  // A handful of distinct stop reasons per batch: dictionary-encoding them costs one Int32 per row.
  // The id is fixed: a batch holds exactly one dictionary.
  stopReason: new Dictionary(new Utf8(), new Int32(), 0, false),
} as const;

/** Columns in wire order with their types. */
export const ROLLOUT_FIELDS: readonly Field[] = [
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
  // Float64: milliseconds of long multi-turn rollouts need more than Float32's 7 digits.
  new Field(Col.generateMs, rolloutTypes.float64, false),
  new Field(Col.scoreMs, rolloutTypes.float64, false),
  new Field(Col.step, rolloutTypes.int32, false),
];

export function rolloutSchema(metadata: Map<string, string>): Schema {
  return new Schema([...ROLLOUT_FIELDS], metadata);
}

/** Human-readable type of a column, e.g. for error messages and `rollstream inspect`. */
export function describeRolloutSchema(): string {
  return ROLLOUT_FIELDS.map((f) => `${f.name}: ${String(f.type)}`).join(", ");
}
