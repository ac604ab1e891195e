// The small engine interface behind vLLM's token-in / token-out route (vllm-generate-route.ts): a request's token
// ids and sampling settings in, the sampled ids, their logprobs and the weights version that sampled each out.
// `rollstream serve` implements it over its own PolicyEngine (policy-token-engine.ts); the inference actor can
// implement it over the run's engine, so an environment server that calls /inference/v1/generate is served by
// the policy being trained, and the request id lets that engine record which policy versions sampled which tokens.

export interface TokenRequest {
  /** The caller's request id (vLLM GenerateRequest.request_id; generated when the caller sent none). */
  requestId: string;
  promptIds: number[];
  maxTokens: number;
  /** 0: greedy. */
  temperature: number;
  topP: number;
  /** 0: off. */
  topK: number;
  /** Absent: the engine picks one. */
  seed?: number;
  /** Ids that end the generation besides the model's own stop ids (EOS, end of turn). */
  stopTokenIds: number[];
  /** Stop at the extra ids only, not at the model's EOS (vLLM ignore_eos). */
  ignoreEos: boolean;
  /** Stop strings, matched on their token ids (the OpenAI routes; the token route has none). */
  stop?: string[];
  /** Prefix-cache namespace: KV is shared only between requests with the same salt. */
  cacheSalt?: string;
  /** The k most likely tokens at each step, with their logprobs (the model's own distribution); 0 or absent: none. */
  topLogprobs?: number;
  /** Aborted when the caller goes away: the engine stops the request. */
  signal: AbortSignal;
  /** Each token as it is sampled (streaming answers). */
  onToken?(t: SampledToken): void;
}

export interface SampledToken {
  tokenId: number;
  logprob: number;
  /** The label of the weights that sampled it (vLLM WeightVersionSpan.version, SGLang weight_version). */
  version: string;
  /** The k most likely tokens at this step (topLogprobs k > 0). */
  top?: { token: number; logprob: number }[];
}

export interface TokenResult {
  tokenIds: number[];
  logprobs: number[];
  /** One label per token: the weights it was sampled under. */
  versions: string[];
  /** stop: a stop id or stop string (its last tokens); length: maxTokens or the context window; abort: ended early by a pause or update. */
  finish: "stop" | "length" | "abort";
  /** Per token, the k most likely tokens (topLogprobs k > 0). */
  topLogprobs?: { token: number; logprob: number }[][];
}

export interface TokenEngine {
  /** Requests beyond these are refused at the edge (400), never handed to the engine. */
  readonly limits: { vocabSize: number; contextTokens: number };
  generate(req: TokenRequest): Promise<TokenResult>;
}

/** Contiguous runs of equal labels over output-token indexes: vLLM's WeightVersionSpan and SGLang's weight_versions. */
export function labelSpans(versions: readonly string[]): { version: string; start: number; end: number }[] {
  const spans: { version: string; start: number; end: number }[] = [];
  versions.forEach((v, i) => {
    const last = spans[spans.length - 1];
    if (last && last.version === v) last.end = i + 1;
    else spans.push({ version: v, start: i, end: i + 1 });
  });
  return spans;
}
