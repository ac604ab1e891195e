// vLLM's token-in / token-out route, POST /inference/v1/generate, over any TokenEngine (token-engine.ts), as
// vllm-project/vllm serves it (vllm/entrypoints/scale_out/token_in_token_out/protocol.py @006ebac:
// GenerateRequest, GenerateTokensResponse / GenerateTokensStreamResponse, GenerateLogProbsContent; outputs.py
// WeightVersionSpan): token ids and sampling_params in; choices[0].{token_ids, logprobs.content[].{token_id,
// logprob, rank, top_logprobs}, finish_reason, weight_versions} out, streamed as SSE with stream: true (spans on
// the last chunk). Only output_mode "tokens" is served (no detokenisation on this route, as upstream's default).
// registerVllmGenerateRoute is mounted by `rollstream serve` and by the inference actor, over its run's engine.
// sampling_params.logprobs k: each token's top_logprobs, the sampled entry then the k most likely others (the model's
// own distribution, log_softmax of the raw logits).
import { randomUUID } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { BadRequest, parseWith } from "./http-errors.js";
import { callerGone, SseStream } from "./sse.js";
import { labelSpans, type TokenEngine, type TokenRequest, type TokenResult } from "./token-engine.js";

const int = z.number().int();

/** A field the engine does not implement, accepted only at its no-op value (clients often send the defaults). */
const noop = <T extends number | boolean>(v: T, what: string) =>
  z
    .literal(v, { message: `${what} is not served (only ${v})` })
    .nullable()
    .optional();

/**
 * vLLM SamplingParams: the fields a token engine honours, and the common ones at their no-op values (a client
 * sending its defaults is served); any other field or value is refused by name.
 */
export const VllmSamplingParams = z.strictObject({
  // vLLM's dataclass default when the caller sets none.
  max_tokens: int.min(1).default(16),
  temperature: z.number().min(0).default(1),
  top_p: z.number().gt(0).max(1).default(1),
  // -1 and 0 both mean off, as in vLLM.
  top_k: int.min(-1).default(0),
  logprobs: int.min(0).max(20).nullable().default(null),
  seed: int
    .min(0)
    .max(2 ** 53 - 1)
    .nullable()
    .default(null),
  stop: z
    .union([z.string().min(1), z.array(z.string().min(1)).max(16)])
    .nullable()
    .default(null),
  stop_token_ids: z.array(int.min(0)).nullable().default(null),
  ignore_eos: z.boolean().default(false),
  // n choices of one prompt: choice i is its own request (request_id:i when n > 1) with seed + i; one prefill.
  n: int.min(1).max(64).nullable().default(1),
  min_p: noop(0, "min_p"),
  min_tokens: noop(0, "min_tokens"),
  presence_penalty: noop(0, "presence_penalty"),
  frequency_penalty: noop(0, "frequency_penalty"),
  repetition_penalty: noop(1, "repetition_penalty"),
  prompt_logprobs: z.null({ message: "prompt_logprobs are not served" }).optional(),
  include_stop_str_in_output: z.boolean().optional(),
  detokenize: z.boolean().optional(),
  skip_special_tokens: z.boolean().optional(),
  spaces_between_special_tokens: z.boolean().optional(),
});

export const VllmGenerateRequest = z.strictObject({
  request_id: z.string().min(1).max(256).optional(),
  token_ids: z.array(int.min(0)).min(1),
  sampling_params: VllmSamplingParams,
  model: z.string().nullable().optional(),
  return_token_ids: z.boolean().nullable().default(null),
  output_mode: z.literal("tokens", { message: 'only output_mode "tokens" is served' }).default("tokens"),
  stream: z.boolean().nullable().default(false),
  stream_options: z.object({ include_usage: z.boolean().nullable().optional() }).nullable().optional(),
  cache_salt: z.string().min(1).max(1024).nullable().default(null),
  priority: z.literal(0, { message: "priority scheduling is not served (priority must be 0)" }).default(0),
});

export type VllmGenerate = z.output<typeof VllmGenerateRequest>;

export interface GenerateRouteOptions {
  /** The served model's name (the `model` field of answers). */
  modelName: string;
  /** The model names served (the base and loaded LoRA adapters): another `model` is a 404. Absent: any name. */
  models?: { check(model: string | null | undefined, field?: string): void };
}

/** A 400 when the prompt does not fit the model (ids outside its vocabulary, longer than its context window). */
export function checkPrompt(engine: TokenEngine, ids: readonly number[], what: string): void {
  const { vocabSize, contextTokens } = engine.limits;
  const bad = ids.findIndex((t) => t >= vocabSize);
  if (bad >= 0) throw new BadRequest(`${what}[${bad}]: token id ${ids[bad]} is outside the model's vocabulary [0, ${vocabSize})`);
  if (ids.length >= contextTokens) throw new BadRequest(`${what}: ${ids.length} tokens leave no room in the model's context window of ${contextTokens}`);
}

/** The TokenRequest of a parsed body. */
export function tokenRequestOf(b: VllmGenerate, requestId: string, signal: AbortSignal): TokenRequest {
  const sp = b.sampling_params;
  return {
    requestId,
    promptIds: b.token_ids,
    maxTokens: sp.max_tokens,
    temperature: sp.temperature,
    topP: sp.top_p,
    topK: Math.max(0, sp.top_k),
    ...(sp.seed === null ? {} : { seed: sp.seed }),
    stopTokenIds: sp.stop_token_ids ?? [],
    ignoreEos: sp.ignore_eos,
    ...(sp.stop === null ? {} : { stop: typeof sp.stop === "string" ? [sp.stop] : sp.stop }),
    ...(b.cache_salt === null ? {} : { cacheSalt: b.cache_salt }),
    ...(sp.logprobs ? { topLogprobs: sp.logprobs } : {}),
    signal,
  };
}

type Top = readonly { token: number; logprob: number }[];

/**
 * GenerateLogProbs as upstream renders it (token_in_token_out/logprobs_render.py @227e42a): per token {token_id,
 * logprob, rank, top_logprobs}, top_logprobs the sampled entry first, then the k most likely others, max(k, 1) in
 * all. rank: the sampled token's place among the k computed (1 = most likely), null when it is not among them (the
 * engine ranks only those).
 */
function logprobsOf(b: VllmGenerate, ids: readonly number[], lps: readonly number[], tops?: readonly Top[]) {
  const k = b.sampling_params.logprobs;
  if (k === null) return null;
  return {
    content: ids.map((token_id, i) => {
      const top = tops?.[i] ?? [];
      const at = top.findIndex((x) => x.token === token_id);
      const sampled = { token_id, logprob: lps[i]!, rank: at >= 0 ? at + 1 : null };
      const others = top.flatMap((x, j) => (x.token === token_id ? [] : [{ token_id: x.token, logprob: x.logprob, rank: j + 1 }]));
      return { ...sampled, top_logprobs: [sampled, ...others].slice(0, Math.max(k, 1)) };
    }),
  };
}

function usageOf(prompt: number, completion: number) {
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/** The non-streaming answer (GenerateTokensResponse). */
export function generateResponse(b: VllmGenerate, requestId: string, modelName: string, results: TokenResult[]) {
  return {
    request_id: requestId,
    model: modelName,
    created: Math.floor(Date.now() / 1000),
    output_mode: "tokens",
    choices: results.map((r, index) => ({
      index,
      finish_reason: r.finish,
      token_ids: r.tokenIds,
      logprobs: logprobsOf(b, r.tokenIds, r.logprobs, r.topLogprobs),
      routed_experts: null,
      sampling_mask: null,
      weight_versions: labelSpans(r.versions),
    })),
    usage: usageOf(
      b.token_ids.length,
      results.reduce((k, r) => k + r.tokenIds.length, 0),
    ),
    prompt_logprobs: null,
    prompt_token_ids: b.return_token_ids ? b.token_ids : null,
  };
}

export function registerVllmGenerateRoute(app: FastifyInstance, engine: TokenEngine, opts: GenerateRouteOptions): void {
  app.post("/inference/v1/generate", async (req, reply) => {
    const b = parseWith(VllmGenerateRequest, req.body, "body");
    opts.models?.check(b.model);
    checkPrompt(engine, b.token_ids, "token_ids");
    const requestId = b.request_id ?? randomUUID();
    const tr = tokenRequestOf(b, requestId, callerGone(reply));
    const n = b.sampling_params.n ?? 1;
    if (b.stream && n > 1) throw new BadRequest("sampling_params.n: a stream serves one choice (n 1)");
    if (b.stream) return streamGenerate(reply, engine, b, tr, opts.modelName);
    // Started in one turn, so the engine admits them together: one prefill of the prompt for all n.
    const choices = Array.from({ length: n }, (_, i) =>
      engine.generate(n === 1 ? tr : { ...tr, requestId: `${requestId}:${i}`, ...(tr.seed === undefined ? {} : { seed: tr.seed + i }) }),
    );
    return generateResponse(b, requestId, opts.modelName, await Promise.all(choices));
  });
}

/** GenerateTokensStreamResponse chunks: one per token, then the finish reason and the spans of the whole output. */
async function streamGenerate(reply: Parameters<typeof callerGone>[0], engine: TokenEngine, b: VllmGenerate, tr: TokenRequest, modelName: string) {
  const sse = new SseStream(reply);
  const base = { request_id: tr.requestId, model: modelName, output_mode: "tokens" };
  let first = true;
  const chunk = (c: Record<string, unknown>) => {
    sse.send({ ...base, choices: [{ index: 0, finish_reason: null, ...c }], ...(first && b.return_token_ids ? { prompt_token_ids: b.token_ids } : {}) });
    first = false;
  };
  try {
    const r = await engine.generate({
      ...tr,
      onToken: (t) => chunk({ token_ids: [t.tokenId], logprobs: logprobsOf(b, [t.tokenId], [t.logprob], t.top ? [t.top] : undefined) }),
    });
    chunk({ token_ids: [], finish_reason: r.finish, weight_versions: labelSpans(r.versions) });
    if (b.stream_options?.include_usage) sse.send({ ...base, choices: [], usage: usageOf(b.token_ids.length, r.tokenIds.length) });
    sse.end();
  } catch (e) {
    sse.fail((e as Error).message);
  }
}
