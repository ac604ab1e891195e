import type { ChatMessage } from "../api/messages.js";

/** One scored (example, rollout) pair: a line of results.jsonl. */
export interface EvalRecord {
  example: number;
  rollout: number;
  rowId: string;
  reward: number;
  components: Record<string, number>;
  metrics: Record<string, number>;
  errors: string[];
  stopReason: string;
  isTruncated: boolean;
  numTurns: number;
  promptTokens: number;
  completionTokens: number;
  /** Completion tokens sampled by the model (mask 1). */
  modelTokens: number;
  policyVersion: [number, number];
  generateMs: number;
  envMs: number;
  scoreMs: number;
  answer: string;
  prompt: ChatMessage[];
  completion: ChatMessage[];
}

/** The settings an interrupted eval must share with its resumption. */
export interface EvalIdentity {
  env: string;
  split: string;
  rolloutsPerExample: number;
  sampling: unknown;
  passThreshold: number;
}

export interface EvalMetadata extends EvalIdentity {
  n: number;
  createdAt: string;
  updatedAt: string;
  completed: boolean;
  /** Scored pairs among the first n examples. */
  done: number;
  /** Anything the caller wants on record (model, env args, command line). */
  info: Record<string, unknown>;
  summary?: unknown;
}
