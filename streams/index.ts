// The wire of a run, behind one facade (as nats.js's mod.ts): actors and cli/ import only this file.
// Each channel owns its subject's schema, headers, msg-id rule, size handling, codec and dead-letter
// policy; the files behind it are building blocks.

// Names, topology, connection parts
export { assertRunName, runNames, weightsObjectName, type RunNames } from "./subjects.js";
export { ensureTopology, deleteTopology, type Topology, type TopologyOptions } from "./topology.js";
export { openWire, type Wire } from "./wire.js";

// Channels
export { RunChannels } from "./channels/run-channels.js";
export type { TaskChannel, RawRolloutChannel, MetricsChannel, EvalChannel } from "./channels/control-channels.js";
export { MsgpackChannel } from "./channels/msgpack-channel.js";
export { ScoredChannel, ScoredReader, type CollectedBatch, type CollectOptions, type ScoredBatchInfo } from "./channels/scored-channel.js";
export { WeightsChannel } from "./channels/weights-channel.js";
export { CheckpointChannel, RestoreChannel, type RestoreRequest } from "./channels/checkpoint-channels.js";
export { DeadLetterChannel, type DeadLetter } from "./channels/dead-letter-channel.js";
export type { ConsumeOptions, Outcome } from "./channels/consume-options.js";

// Message schemas and types
export {
  TaskSchema,
  SamplingSchema,
  RawRolloutSchema,
  RawRolloutGroupSchema,
  WeightsAnnouncementSchema,
  StateAnnouncementSchema,
  RestoreReplySchema,
  MetricsEventSchema,
  EvalMessageSchema,
  EvalSampleSchema,
  EvalResultSchema,
  type Task,
  type RawRollout,
  type RawRolloutGroup,
  type WeightsAnnouncement,
  type StateAnnouncement,
  type RestoreReply,
  type MetricsEvent,
  type EvalMessage,
} from "./messages.js";
export { toRawRollout, toScoredRow, rowToRolloutResult, type ScoredRowContext } from "./rollout-record.js";
export { ROLLOUT_SCHEMA_VERSION, Col as RolloutColumns, describeRolloutSchema, type RolloutRow, type RolloutBatchMeta } from "./rollout-schema.js";
export { decodeRolloutBatch, RolloutBatchError, type DecodedRolloutBatch } from "./arrow-codec.js";

// Run state (KV)
export { RunState, StateValueError } from "./run-state.js";
export {
  StateKeys,
  StateKeySchemas,
  LearnerStarvedSchema,
  HeldOutResultSchema,
  type StateKey,
  type StateValue,
  type LearnerStarved,
  type HeldOutResult,
} from "./state-keys.js";

// Errors and message plumbing that tools show
export { PoisonMessageError, isPoison } from "./dead-letter.js";
export { MessageValidationError, formatIssues, decodeMsgpack } from "./msgpack-codec.js";
export { ContentType, Hdr, headerRecord } from "./headers.js";
export { blobOf, readPayload } from "./large-payload.js";
export { StreamReader } from "./stream-reader.js";
export { sha256Hex } from "./sha256.js";

// The sandbox service (request/reply)
export { NatsSandboxClient, SandboxServiceError, type NatsSandboxClientOptions } from "./sandbox-client.js";
export {
  decodeExecRequest,
  decodeSessionClose,
  decodeSessionExec,
  decodeSessionOpen,
  encodeErrorBody,
  encodeExecResult,
  encodeSessionCloseReply,
  encodeSessionOpenReply,
  SANDBOX_QUEUE_GROUP,
  SANDBOX_SERVICE_NAME,
  SANDBOX_SERVICE_VERSION,
  SandboxSubjects,
} from "./sandbox-protocol.js";
