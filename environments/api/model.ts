import { z } from "zod";
import type { TokenizerLike } from "./tokenizer.js";

export interface SamplingArgs {
  temperature: number;
  topP: number;
  /** 0 disables top-k. */
  topK: number;
  /** Most new tokens for one generate call (one model turn). */
  maxTokens: number;
  stop?: string[];
}

export const samplingArgsSchema = z.object({
  temperature: z.number().min(0),
  topP: z.number().gt(0).max(1),
  topK: z.number().int().min(0),
  maxTokens: z.number().int().positive(),
  stop: z.array(z.string().min(1)).optional(),
});

export const defaultSampling: SamplingArgs = { temperature: 1, topP: 1, topK: 0, maxTokens: 256 };

/**
 * One continuation. tokenIds are every token the model sampled, including a final EOS / end-of-turn token
 * when it produced one (it was sampled, so it is trained on); logprobs[i] belongs to tokenIds[i].
 * text is the decoded reply without special tokens, cut before a matched stop string.
 */
export interface Generation {
  tokenIds: number[];
  logprobs: number[];
  text: string;
  /** eos: a stop token; stop: a stop string; length: maxTokens reached; context: the context window is full. */
  stopReason: "eos" | "stop" | "length" | "context";
  /** The version that sampled the first token (for a generation without versionSpans: every token). */
  policyVersion: number;
  /**
   * Which policy version sampled which tokens, when weights changed mid-generation: spans [start, end) over
   * tokenIds, in order, covering all of them. Absent: every token under policyVersion.
   */
  versionSpans?: VersionSpan[];
}

/** Tokens [start, end) sampled under policy `version`. */
export interface VersionSpan {
  version: number;
  start: number;
  end: number;
}

/** Continue a token prefix. The runtime batches concurrent calls; an environment just awaits. */
export interface ModelClient {
  readonly tokenizer: TokenizerLike;
  generate(promptIds: number[], args: SamplingArgs, signal?: AbortSignal): Promise<Generation>;
}
