// The wire of a run, behind one facade (as nats.js's mod.ts): actors and cli/ import only this file.
// Each channel owns its subject's schema, headers, msg-id rule, size handling, codec and dead-letter
// policy; the files behind it are building blocks.

// Names, topology, connection parts
export { runNames, stateObjectName, type RunNames } from "./subjects.js";
export { ensureTopology, deleteTopology, openStateBucket, type Topology } from "./topology.js";
export { openWire, type Wire } from "./wire.js";
export { StreamReader } from "./stream-reader.js";

// Channels
export { RunChannels } from "./channels/run-channels.js";
export type { TaskChannel, RawRolloutChannel, EvalChannel, MetricsChannel } from "./channels/control-channels.js";
export type { MsgpackReader, ReadMessage } from "./channels/msgpack-channel.js";
export { readStepRecords, type GroupChannel, type StepChannel, type ReplayChannel } from "./channels/feedback-channels.js";
export type { ScoredChannel, ScoredReader, BatchSource } from "./channels/scored-channel.js";
export { DEFAULT_CRASH_LIMIT, type AttemptLedger } from "./attempt-ledger.js";
export type { LoraAdapterFiles, WeightsChannel } from "./channels/weights-channel.js";
export type { CheckpointChannel, RestoreChannel, RestoreRequest } from "./channels/checkpoint-channels.js";
export type { ConsumeOptions, ConsumeActivity } from "./channels/consume-options.js";
export type { DeadLetterChannel } from "./channels/dead-letter-channel.js";

// Feedback records: what steers the loop (groups, steps) and what replays found
export {
  GroupOutcomeSchema,
  StepRecordSchema,
  ReplayRecordSchema,
  stepRecordOf,
  type GroupOutcome,
  type StepRecord,
  type ReplayRecord,
} from "./feedback.js";

// Message schemas and types
export {
  EvalMessageSchema,
  MetricsEventSchema,
  StateAnnouncementSchema,
  WeightsAnnouncementSchema,
  type Task,
  type RawRollout,
  type RawRolloutGroup,
  type WeightsAnnouncement,
  type StateAnnouncement,
  type RestoreReply,
  type MetricsEvent,
  type EvalMessage,
} from "./messages.js";
export { toRawRollout, toScoredRow } from "./rollout-record.js";
export { checkAdvantage, checkRolloutLimits, rejectReasonOf, RolloutRejectedError, type RolloutLimits } from "./rollout-limits.js";
export { checkTask, type TaskLimits } from "./task-limits.js";
export { checkTurnText } from "./turn-text.js";
export type { RolloutRow } from "./rollout-schema.js";
export { decodeRolloutBatch } from "./arrow-codec.js";

// Run state (KV)
export { RunState, StateValueError, type StateRead } from "./run-state.js";
export { PolicyVersions, type RunStateProblem } from "./policy-versions.js";
export { StateKeys, StateKeySchemas, type HeldOutResult, type Lease, type LeaseRole, type StateKey } from "./state-keys.js";

// Run ownership: one holder per role (train, each singleton actor), by compare-and-set on a KV key
export {
  describeHolder,
  HeldLease,
  holderName,
  LeaseLostError,
  leaseVerdict,
  processIdentity,
  RunLeases,
  type LeaseIdentity,
  type LeaseSettings,
  type LeaseTake,
  type LeaseVerdict,
} from "./lease.js";

// Run health: heartbeats, idle ratios, and what the work consumers have not finished
export {
  EngineFiguresSchema,
  formatIdleRatios,
  HealthBoard,
  HeartbeatSchema,
  healthKey,
  readIdleRatios,
  summariseIdle,
  type EngineFigures,
  type HealthEntry,
  type Heartbeat,
  type IdleSummary,
  type LogLine,
  type RemoteEnvHealth,
} from "./health.js";
export { consumerBacklogs, type ConsumerBacklog, type OldestMessage } from "./consumer-backlog.js";

// Deadlines for calls that can block
export { DeadlineError, withDeadline } from "./deadline.js";

// Errors and message plumbing that tools show
export { PoisonMessageError } from "./dead-letter.js";
export { MessageValidationError, decodeMsgpack } from "./msgpack-codec.js";
export { ContentType, Hdr, headerRecord } from "./headers.js";
export { blobOf, readPayload } from "./large-payload.js";
export { sha256Hex } from "./sha256.js";

// The sandbox service (request/reply)
export { NatsSandboxClient } from "./sandbox-client.js";
export {
  decodeBatchRequest,
  decodeExecRequest,
  decodeSessionClose,
  decodeSessionExec,
  decodeSessionOpen,
  encodeBatchResult,
  encodeErrorBody,
  encodeExecResult,
  encodeSessionCloseReply,
  encodeSessionOpenReply,
  SANDBOX_QUEUE_GROUP,
  SANDBOX_SERVICE_NAME,
  SANDBOX_SERVICE_VERSION,
  SandboxSubjects,
} from "./sandbox-protocol.js";
export {
  DiskFullError,
  INFRA_RETRY_DELAYS_MS,
  isDiskFull,
  isInfrastructureError,
  isNoRoomOnDisk,
  isStoreFull,
  retryInfrastructure,
  StorageBlockedError,
} from "./infrastructure-error.js";
