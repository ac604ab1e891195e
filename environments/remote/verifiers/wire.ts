// The verifiers v1 env-server wire, as zod schemas: what a DEALER sends ([request_id, method, msgpack(payload)])
// and what comes back ([request_id, msgpack(response)]). Field for field after PrimeIntellect-ai/verifiers@a60a606:
// verifiers/v1/serve/types.py (requests and responses), verifiers/v1/episode.py (WireEpisode),
// verifiers/v1/trace.py (Trace, Reward, Error, ModelCall), verifiers/v1/graph.py (MessageNode),
// verifiers/v1/configs/client.py (TrainClientConfig), verifiers/v1/types.py (SamplingConfig). Only the fields
// rollstream reads are required; the rest pass through untouched (the upstream models allow extras too).
import { z } from "zod";

export const VERIFIERS_METHODS = ["health", "run", "cancel"] as const;

/** The `client` of a run request: vLLM's /inference/v1/generate at base_url, every request with `headers`. */
export interface TrainClientConfig {
  type: "train";
  base_url: string;
  api_key_var: string;
  headers: Record<string, string>;
  renderer: null;
  renderer_model_name: string | null;
  multiplex: number;
}

/** SamplingConfig: typed knobs; provider keys (top_k, extra_body) pass through. */
export interface WireSampling {
  temperature: number;
  top_p: number;
  max_tokens: number;
  top_k?: number;
  extra_body?: Record<string, unknown>;
}

export interface RunRequest {
  task_data: Record<string, unknown>;
  client: TrainClientConfig;
  model: string;
  sampling: WireSampling;
}

const errorSchema = z.object({ type: z.string(), message: z.string() }).passthrough();
export type WireError = z.infer<typeof errorSchema>;

/** BaseResponse: every reply has these. */
export const baseResponseSchema = z.object({ success: z.boolean(), error: z.string().nullable().optional() }).passthrough();

/** Message content: text, a list of parts ({type: "text", text}), or none. */
const contentSchema = z.union([z.string(), z.array(z.object({ type: z.string(), text: z.string().optional() }).passthrough()), z.null()]).optional();

export const messageNodeSchema = z
  .object({
    parent: z.number().int().nonnegative().nullable().default(null),
    message: z.object({ role: z.string(), content: contentSchema }).passthrough(),
    sampled: z.boolean().default(false),
    token_ids: z.array(z.number().int().nonnegative()).default([]),
    mask: z.array(z.boolean()).default([]),
    logprobs: z.array(z.number()).default([]),
  })
  .passthrough();
export type MessageNode = z.infer<typeof messageNodeSchema>;

const rewardSchema = z.object({ score: z.number(), weight: z.number().default(1) }).passthrough();

export const traceSchema = z
  .object({
    version: z.number().int().default(1),
    id: z.string(),
    verifiers: z.object({ version: z.string(), commit: z.string().nullable().optional() }).passthrough().optional(),
    agent: z
      .object({ name: z.string().default("agent"), trainable: z.boolean().default(true) })
      .passthrough()
      .optional(),
    nodes: z.array(messageNodeSchema).default([]),
    calls: z.array(z.object({ node: z.number().int().nullable().optional(), finish_reason: z.string().nullable().optional() }).passthrough()).default([]),
    rewards: z.record(z.string(), rewardSchema.nullable()).default({}),
    metrics: z.record(z.string(), z.number().nullable()).default({}),
    is_completed: z.boolean().default(false),
    ok: z.boolean().default(false),
    stop_condition: z.string().nullable().optional(),
    errors: z.array(errorSchema).default([]),
  })
  .passthrough();
export type Trace = z.infer<typeof traceSchema>;

export const episodeSchema = z
  .object({
    id: z.string(),
    env: z
      .object({ id: z.string().default(""), name: z.string().nullable().optional() })
      .passthrough()
      .default({ id: "" }),
    ok: z.boolean().default(false),
    errors: z.array(errorSchema).default([]),
    traces: z.array(traceSchema).default([]),
  })
  .passthrough();
export type Episode = z.infer<typeof episodeSchema>;

export const runResponseSchema = baseResponseSchema.extend({ episode: episodeSchema.nullable().optional() });
export const cancelResponseSchema = baseResponseSchema.extend({ cancelled: z.boolean().default(false) });
