import type { DatasetRow } from "./dataset.js";
import type { ChatMessage } from "./messages.js";
import type { ModelEndpoint } from "./model-endpoint.js";
import type { ModelClient, SamplingArgs, VersionSpan } from "./model.js";
import type { CodeSandbox } from "./sandbox.js";

export interface RolloutContext {
  model: ModelClient;
  sandbox?: CodeSandbox;
  sampling: SamplingArgs;
  /** Aborted by the runtime (shutdown, cancelled task): the rollout rejects. */
  signal?: AbortSignal;
  /** The policy over HTTP, for a remote environment whose server calls the model itself (verifiers env-server). */
  endpoint?: ModelEndpoint;
  /** Names the rollout in logs and in the server's requests (task id and index), when the runtime has one. */
  rolloutId?: string;
}

export interface RolloutResult {
  /** The tokenized initial prompt (chat template with the generation prompt). */
  promptIds: number[];
  /** Everything after the prompt: model turns AND env/tool responses, one sequence. */
  completionIds: number[];
  /** 1 = token sampled by the model (trained on); 0 = env/tool/template tokens. */
  completionMask: number[];
  /** Per completion token; 0 where mask = 0. */
  samplerLogprobs: number[];
  /** Full transcript including the prompt (may end with a final env message the model never saw). */
  messages: ChatMessage[];
  numTurns: number;
  /** Completion-token offset at which each model turn starts (one entry per model turn). */
  turnOffsets: number[];
  stopReason: string;
  isTruncated: boolean;
  policyVersionMin: number;
  policyVersionMax: number;
  /** Which policy version sampled which completion tokens ([start, end) over completionIds, in order); absent or
   *  empty from a rollout that does not say (then each model turn is one version between min and max). */
  versionSpans?: VersionSpan[];
  /** Environment state; numeric entries of state.metrics become rubric metrics, state.errors score errors. */
  state: Record<string, unknown>;
  timings: { generateMs: number; envMs: number };
}

/**
 * The messages after the prompt (model turns and env responses). A rollout that adds messages to the row's
 * prompt (e.g. tool instructions) records the real prompt length in state.promptLength.
 */
export function completionMessages(r: RolloutResult, row: DatasetRow): ChatMessage[] {
  const n = typeof r.state["promptLength"] === "number" ? (r.state["promptLength"] as number) : row.prompt.length;
  return r.messages.slice(n);
}
