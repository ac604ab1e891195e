// A test server that speaks vLLM's token-in / token-out API, only the routes rollstream uses, written from the
// upstream sources (vllm-project/vllm entrypoints/scale_out/token_in_token_out/protocol.py @006ebac
// GenerateRequest / GenerateTokensResponse, frontend/.../token_in_token_out/api_router.py and serving.py @055e47c,
// outputs.py WeightVersionSpan @006ebac, serve/dev/rlhf/api_router.py @0100a21 /pause /resume /is_paused
// /update_weight_version): POST /inference/v1/generate, POST /pause?mode=abort|wait|keep, POST /resume,
// GET /is_paused, POST /update_weight_version, GET /health; and the full-weight reload that upstream lacks, in
// PRIME-RL's worker-extension shape (prime-rl src/prime_rl/inference/vllm/server.py: POST /update_weights
// {weight_dir}). Bodies are checked strictly against the upstream field names, so a misspelt field is a 400.
// LoRA adapters, as vLLM serves them with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (vllm-project/vllm
// vllm/frontend/entrypoints/serve/lora/api_router.py @055e47c, openai/models/serving.py @055e47c
// OpenAIServingModels.load_lora_adapter / unload_lora_adapter / check_model, serve/lora/protocol.py
// LoadLoRAAdapterRequest {lora_name, lora_path, load_inplace, is_3d_lora_weight}, UnloadLoRAAdapterRequest
// {lora_name, lora_int_id}): 200 with a text body; 400 InvalidUserInput for a name loaded already (without
// load_inplace); 404 NotFoundError for unloading an unknown name; a generate request whose `model` is neither the
// base nor a loaded adapter is a 404 "The model `x` does not exist.".
import Fastify, { type FastifyInstance } from "fastify";
import { z } from "zod";
import type { EngineDouble } from "./engine-double.js";

const int = z.number().int();

/** The GenerateRequest fields a token-in client sends (a subset of the upstream model, same names). */
export const GenerateRequest = z.strictObject({
  request_id: z.string().optional(),
  token_ids: z.array(int.nonnegative()).min(1),
  sampling_params: z.strictObject({
    max_tokens: int.min(1).optional(),
    temperature: z.number().nonnegative().optional(),
    top_p: z.number().gt(0).lte(1).optional(),
    top_k: int.min(-1).optional(),
    logprobs: int.nonnegative().nullable().optional(),
    seed: int.nullable().optional(),
    stop_token_ids: z.array(int).nullable().optional(),
  }),
  cache_salt: z.string().min(1).max(1024).nullable().optional(),
  priority: int.optional(),
  return_token_ids: z.boolean().nullable().optional(),
  output_mode: z.enum(["tokens", "text"]).optional(),
  stream: z.boolean().nullable().optional(),
  model: z.string().nullable().optional(),
});

export interface VllmServerOptions {
  /** Report choices[].weight_versions, as vLLM main does; off: a release that reports none. */
  reportVersions?: boolean;
}

/** vLLM's ErrorResponse. */
const errorOf = (message: string, type: string, code: number) => ({ error: { message, type, param: null, code } });

const LoadLoRAAdapterRequest = z.strictObject({
  lora_name: z.string(),
  lora_path: z.string(),
  load_inplace: z.boolean().optional(),
  is_3d_lora_weight: z.boolean().optional(),
});
const UnloadLoRAAdapterRequest = z.strictObject({ lora_name: z.string(), lora_int_id: int.nullable().optional() });

/** The base model's name (served as `model` in answers). */
const BASE = "test";

function loraRoutes(app: FastifyInstance, engine: EngineDouble): void {
  app.post("/v1/load_lora_adapter", async (req, reply) => {
    engine.received.push({ route: "/v1/load_lora_adapter", body: req.body });
    const parsed = LoadLoRAAdapterRequest.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send(errorOf(parsed.error.message, "BadRequestError", 400));
    const b = parsed.data;
    if (!b.lora_name || !b.lora_path) return reply.code(400).send(errorOf("Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput", 400));
    if (!b.load_inplace && engine.adapters.has(b.lora_name)) {
      const message = `The lora adapter '${b.lora_name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`;
      return reply.code(400).send(errorOf(message, "InvalidUserInput", 400));
    }
    try {
      await engine.loadAdapter(b.lora_name, b.lora_path);
    } catch (e) {
      return reply.code(500).send(errorOf((e as Error).message, "InternalServerError", 500));
    }
    return reply.code(200).send(`Success: LoRA adapter '${b.lora_name}' added successfully.`);
  });
  app.post("/v1/unload_lora_adapter", async (req, reply) => {
    engine.received.push({ route: "/v1/unload_lora_adapter", body: req.body });
    const parsed = UnloadLoRAAdapterRequest.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send(errorOf(parsed.error.message, "BadRequestError", 400));
    if (!engine.adapters.delete(parsed.data.lora_name))
      return reply.code(404).send(errorOf(`The lora adapter '${parsed.data.lora_name}' cannot be found.`, "NotFoundError", 404));
    return reply.code(200).send(`Success: LoRA adapter '${parsed.data.lora_name}' removed successfully.`);
  });
  app.get("/v1/models", async () => ({
    object: "list",
    data: [{ id: BASE, object: "model", root: BASE, parent: null }, ...[...engine.adapters].map(([id, root]) => ({ id, object: "model", root, parent: BASE }))],
  }));
}

export function vllmApp(engine: EngineDouble, opts: VllmServerOptions = {}): FastifyInstance {
  const app = Fastify({ forceCloseConnections: true });
  let paused = false;
  loraRoutes(app, engine);
  app.get("/metrics", async (_req, reply) => (engine.metrics === null ? reply.code(404).send() : reply.type("text/plain").send(engine.metrics)));
  app.get("/health", async (_req, reply) => reply.code(engine.unhealthy ? 503 : 200).send());
  app.post("/inference/v1/generate", async (req, reply) => {
    engine.received.push({ route: "/inference/v1/generate", body: req.body });
    const parsed = GenerateRequest.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send({ error: { message: parsed.error.message, type: "BadRequestError", code: 400 } });
    const b = parsed.data;
    if (b.model && b.model !== BASE && !engine.adapters.has(b.model))
      return reply.code(404).send(errorOf(`The model \`${b.model}\` does not exist.`, "NotFoundError", 404));
    engine.adapterOfRequests.push(b.model && b.model !== BASE ? b.model : null);
    const sp = b.sampling_params;
    const r = await engine.run(b.token_ids, sp.max_tokens ?? 16, sp.stop_token_ids ?? [], sp.seed ?? 0, {
      temperature: sp.temperature ?? 1,
      topP: sp.top_p ?? 1,
      topK: sp.top_k === undefined || sp.top_k === -1 ? 0 : sp.top_k,
    });
    const logprobs = sp.logprobs == null ? null : { content: r.tokens.map((t, i) => ({ token_id: t, logprob: r.logprobs[i], rank: 1, top_logprobs: [] })) };
    return {
      request_id: `generate-tokens-${b.request_id ?? "x"}`,
      model: b.model ?? BASE,
      created: Math.floor(Date.now() / 1000),
      output_mode: "tokens",
      choices: [
        {
          index: 0,
          finish_reason: r.finish,
          token_ids: r.tokens,
          logprobs,
          routed_experts: null,
          sampling_mask: null,
          weight_versions: opts.reportVersions === false ? null : r.spans,
        },
      ],
      usage: { prompt_tokens: b.token_ids.length, completion_tokens: r.tokens.length, total_tokens: b.token_ids.length + r.tokens.length },
      prompt_logprobs: null,
      prompt_token_ids: b.return_token_ids ? b.token_ids : null,
    };
  });
  app.post("/pause", async (req, reply) => {
    const mode = (req.query as { mode?: string }).mode ?? "abort";
    engine.received.push({ route: `/pause?mode=${mode}`, body: req.body });
    if (!["abort", "wait", "keep"].includes(mode)) return reply.code(400).send({ error: `invalid mode ${mode}` });
    if (mode === "abort") engine.abortAll();
    if (mode === "wait") await engine.drain();
    engine.hold();
    paused = true;
    return { status: "paused" };
  });
  app.post("/resume", async (req) => {
    engine.received.push({ route: "/resume", body: req.body });
    engine.release();
    paused = false;
    return { status: "resumed" };
  });
  app.get("/is_paused", async () => ({ is_paused: paused }));
  app.post("/update_weight_version", async (req, reply) => {
    engine.received.push({ route: "/update_weight_version", body: req.body });
    const b = z.strictObject({ new_version: z.string() }).safeParse(req.body);
    if (!b.success) return reply.code(400).send({ error: b.error.message });
    engine.label = b.data.new_version;
    return { success: true, new_version: b.data.new_version };
  });
  app.post("/update_weights", async (req, reply) => {
    engine.received.push({ route: "/update_weights", body: req.body });
    const b = z.strictObject({ weight_dir: z.string() }).safeParse(req.body);
    if (!b.success) return reply.code(400).send({ error: b.error.message });
    try {
      await engine.load(b.data.weight_dir, null);
      return { status: "ok" };
    } catch (e) {
      return reply.code(500).send({ error: (e as Error).message });
    }
  });
  return app;
}
