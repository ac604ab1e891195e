// The environment API: what an environment module implements and the building blocks it is made of.
export type { ChatMessage, ChatRole, FewShotExample } from "./messages.js";
export { chatMessageSchema, buildPrompt, lastAssistantText } from "./messages.js";
export type { TokenizerLike } from "./tokenizer.js";
export type { SamplingArgs, Generation, ModelClient, VersionSpan } from "./model.js";
export { samplingArgsSchema, defaultSampling } from "./model.js";
export type { DatasetRow, Dataset, DatasetSplit, SplitName } from "./dataset.js";
export { datasetRowSchema, listDataset, generatorDataset, validatedDataset } from "./dataset.js";
export type { RolloutContext, RolloutResult } from "./rollout.js";
export type { ModelEndpoint, EndpointSession, EndpointCall } from "./model-endpoint.js";
export { completionMessages } from "./rollout.js";
export type { ScoreResult } from "./score.js";
export type { Environment, LoadEnvironment, EnvironmentDefinition, RemoteEnvironmentInfo } from "./environment.js";
export { createEnvironment, envId, heldOutSplits } from "./environment.js";
export type {
  CodeSandbox,
  SandboxSession,
  SandboxExecRequest,
  SandboxExecResult,
  SandboxLimits,
  SandboxLanguage,
} from "./sandbox.js";
export type { ParseResult } from "./parser.js";
export { Parser, PlainParser } from "./parser.js";
export { ThinkParser } from "./think-parser.js";
export { XMLParser } from "./xml-parser.js";
export { BoxedParser, extractBoxed } from "./boxed-parser.js";
export type { RewardInput, RewardValue, RewardFunction, GroupRewardFunction, RubricEntry, RubricOptions } from "./rubric.js";
export { Rubric } from "./rubric.js";
export { TokenTranscript } from "./transcript.js";
export { singleTurnRollout } from "./single-turn.js";
export type { EnvResponse, MultiTurnOptions, RolloutState } from "./multi-turn.js";
export { multiTurnRollout } from "./multi-turn.js";
export type { Tool, ToolContext } from "./tools.js";
export { defineTool, toolJsonSchema } from "./tools.js";
export type { ParsedToolCall } from "./tool-protocol.js";
export { TOOL_OPEN, TOOL_CLOSE, hasToolCall, parseToolCalls, formatToolCall, toolInstructions } from "./tool-protocol.js";
export type { ToolCallFormat, ToolCallFormatName, ToolCallFormatSetting } from "./tool-call-format.js";
export { toolCallFormat } from "./tool-call-format.js";
export { HERMES_OPEN, HERMES_CLOSE, formatHermesCall, parseHermesCalls, hermesTemplateTools, pythonJson } from "./hermes-tool-calls.js";
export type { ReasoningMode, SplitReply } from "./reasoning.js";
export { splitReasoning } from "./reasoning.js";
export type { ToolRolloutOptions } from "./tool-rollout.js";
export { toolRollout } from "./tool-rollout.js";
export { TimeLimitError, withTimeLimit } from "../util/time-limit.js";
