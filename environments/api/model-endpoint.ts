import type { Generation, ModelClient, SamplingArgs } from "./model.js";

/**
 * The policy behind an HTTP endpoint, for environments whose server calls the model itself (a verifiers
 * env-server calls vLLM's `POST /inference/v1/generate`). The runtime serves it over its own engine and
 * injects it; an environment opens one session per rollout, hands the server `baseUrl` and the session's
 * `headers`, and afterwards reads what the engine generated for that rollout (`calls`), so it can check the
 * server's trace against the engine's own record rather than trust it.
 */
export interface ModelEndpoint {
  /** What the server's client appends `/inference/v1/generate` to (no trailing slash). */
  readonly baseUrl: string;
  /** The model name the server sends back in its requests (informational: the session decides). */
  readonly model: string;
  /**
   * A session whose requests (those carrying its headers) `model` serves under `sampling` (a request may ask for
   * fewer tokens, never more). Close it when the rollout ends: later requests with its headers are refused.
   */
  open(model: ModelClient, sampling: SamplingArgs): EndpointSession;
}

export interface EndpointSession {
  /** Headers the server must send with every generate request of this rollout. */
  readonly headers: Readonly<Record<string, string>>;
  /** Every generation served for this rollout, in the order the engine finished them. */
  readonly calls: readonly EndpointCall[];
  close(): void;
}

/** One generate request as the engine served it: the prompt it continued and what it sampled. */
export interface EndpointCall {
  promptIds: number[];
  generation: Generation;
  /** How long the engine took over it. */
  ms: number;
}
