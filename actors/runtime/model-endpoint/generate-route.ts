// vLLM's token-in/token-out route, POST /inference/v1/generate, over a rollout's own ModelClient: the request and
// reply follow vllm:vllm/entrypoints/scale_out/token_in_token_out/protocol.py@006ebac field for field (the
// fields an env server's client sends; the rest are accepted and ignored). Which client serves a request is
// the caller's choice (`sessionOf`): the env server sends the rollout's session header with every call.
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import type { Generation, ModelClient, SamplingArgs } from "../../../environments/api/index.js";

export const GENERATE_PATH = "/inference/v1/generate";

const generateRequestSchema = z.object({
  request_id: z.string().optional(),
  token_ids: z.array(z.number().int().nonnegative()).min(1),
  sampling_params: z
    .object({
      max_tokens: z.number().int().positive().optional(),
      temperature: z.number().min(0).optional(),
      top_p: z.number().gt(0).max(1).optional(),
      logprobs: z.number().int().min(0).nullable().optional(),
    })
    .passthrough()
    .default({}),
  cache_salt: z.string().nullable().optional(),
  stream: z.boolean().optional(),
});
export type GenerateRequest = z.infer<typeof generateRequestSchema>;

/** What serves one request: the rollout's client and the sampling its task fixed. */
export interface GenerateSession {
  model: ModelClient;
  sampling: SamplingArgs;
  record(promptIds: number[], generation: Generation, ms: number): void;
}

export interface GenerateRouteOptions {
  /** The session a request belongs to, or a one-line reason it has none (answered 404). */
  sessionOf(req: FastifyRequest): GenerateSession | string;
  /** Aborts generations in flight (shutdown). */
  signal?: AbortSignal;
}

/** Registers the route on `app`. */
export function registerGenerateRoute(app: FastifyInstance, opts: GenerateRouteOptions): void {
  app.post(GENERATE_PATH, async (req, reply) => {
    const parsed = generateRequestSchema.safeParse(req.body);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      return reply.code(400).send({ error: `bad generate request: ${issue.path.join(".") || "(body)"}: ${issue.message}` });
    }
    const body = parsed.data;
    if (body.stream) return reply.code(400).send({ error: "bad generate request: stream is not supported (send stream: false)" });
    const session = opts.sessionOf(req);
    if (typeof session === "string") return reply.code(404).send({ error: session });
    // The task's sampling is the policy's: a request may ask for fewer tokens, never for another distribution.
    const maxTokens = Math.min(body.sampling_params.max_tokens ?? session.sampling.maxTokens, session.sampling.maxTokens);
    const t0 = performance.now();
    const gen = await session.model.generate(body.token_ids, { ...session.sampling, maxTokens }, opts.signal);
    session.record(body.token_ids, gen, performance.now() - t0);
    return generateReply(body, gen);
  });
}

function generateReply(body: GenerateRequest, gen: Generation) {
  return {
    request_id: body.request_id ?? "",
    choices: [
      {
        index: 0,
        finish_reason: gen.stopReason === "eos" || gen.stopReason === "stop" ? "stop" : "length",
        token_ids: gen.tokenIds,
        logprobs: { content: gen.tokenIds.map((id, i) => ({ token_id: id, logprob: gen.logprobs[i]!, rank: null, top_logprobs: [] })) },
        routed_experts: null,
      },
    ],
    prompt_logprobs: null,
    prompt_token_ids: null,
    usage: { prompt_tokens: body.token_ids.length, completion_tokens: gen.tokenIds.length, total_tokens: body.token_ids.length + gen.tokenIds.length },
  };
}
