// A test server that speaks SGLang's native HTTP API, only the routes rollstream uses, written from the
// upstream sources (sgl-project/sglang python/sglang/srt/entrypoints/http_server.py @0025436/@9c0549b,
// managers/io_struct.py GenerateReqInput / UpdateWeightFromDiskReqInput / PauseGenerationReqInput @001067f,
// sampling/sampling_params.py @00c17ca, utils/weight_versions.py, schedule_batch.py FINISH_* to_json):
// POST /generate, POST /update_weights_from_disk, POST /pause_generation, POST /continue_generation,
// GET /health. Bodies are checked strictly against the upstream field names, so a misspelt field is a 400.
// LoRA adapters (http_server.py @9c0549b /load_lora_adapter, /unload_lora_adapter; managers/io_struct.py @001067f
// LoadLoRAAdapterReqInput {lora_name, lora_path, pinned, lora_id}, UnloadLoRAAdapterReqInput {lora_name, lora_id},
// LoRAUpdateOutput {success, error_message, loaded_adapters}: 200 when success, else 400 with the same body;
// GenerateReqInput.lora_path names a loaded adapter, an unknown one is a 400).
import Fastify, { type FastifyInstance } from "fastify";
import { z } from "zod";
import type { EngineDouble } from "./engine-double.js";

const int = z.number().int();

/** The GenerateReqInput fields a token-in client sends (a subset of the upstream dataclass, same names). */
export const GenerateReqInput = z.strictObject({
  rid: z.string().optional(),
  input_ids: z.array(int.nonnegative()).min(1),
  sampling_params: z.strictObject({
    max_new_tokens: int.nonnegative().optional(),
    temperature: z.number().nonnegative().optional(),
    top_p: z.number().gt(0).lte(1).optional(),
    top_k: int.refine((k) => k === -1 || k >= 1, "top_k must be -1 (disable) or at least 1").optional(),
    stop_token_ids: z.array(int).optional(),
    sampling_seed: int.optional(),
  }),
  return_logprob: z.boolean().optional(),
  logprob_start_len: int.optional(),
  stream: z.literal(false).optional(),
  extra_key: z.string().optional(),
  lora_path: z.string().nullable().optional(),
});

const LoadLoRAAdapterReqInput = z.strictObject({
  lora_name: z.string(),
  lora_path: z.string(),
  pinned: z.boolean().optional(),
  lora_id: z.string().nullable().optional(),
});
const UnloadLoRAAdapterReqInput = z.strictObject({ lora_name: z.string(), lora_id: z.string().nullable().optional() });

/** LoRAUpdateOutput: loaded_adapters maps each name to its LoRARef. */
function loraUpdateOutput(engine: EngineDouble, success: boolean, error_message: string | null) {
  const loaded_adapters = Object.fromEntries(
    [...engine.adapters].map(([lora_name, lora_path], i) => [lora_name, { lora_id: `id-${i}`, lora_name, lora_path, pinned: false }]),
  );
  return { success, error_message, loaded_adapters };
}

function loraRoutes(app: FastifyInstance, engine: EngineDouble): void {
  app.post("/load_lora_adapter", async (req, reply) => {
    engine.received.push({ route: "/load_lora_adapter", body: req.body });
    const parsed = LoadLoRAAdapterReqInput.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send({ object: "error", message: parsed.error.message, code: 400 });
    const b = parsed.data;
    if (engine.adapters.has(b.lora_name))
      return reply.code(400).send(loraUpdateOutput(engine, false, `Failed to load LoRA adapter ${b.lora_name}: already exists`));
    try {
      await engine.loadAdapter(b.lora_name, b.lora_path);
      return loraUpdateOutput(engine, true, null);
    } catch (e) {
      return reply.code(400).send(loraUpdateOutput(engine, false, (e as Error).message));
    }
  });
  app.post("/unload_lora_adapter", async (req, reply) => {
    engine.received.push({ route: "/unload_lora_adapter", body: req.body });
    const parsed = UnloadLoRAAdapterReqInput.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send({ object: "error", message: parsed.error.message, code: 400 });
    if (!engine.adapters.delete(parsed.data.lora_name))
      return reply.code(400).send(loraUpdateOutput(engine, false, `LoRA adapter ${parsed.data.lora_name} is not loaded`));
    return loraUpdateOutput(engine, true, null);
  });
}

export const UpdateWeightFromDiskReqInput = z.strictObject({
  model_path: z.string(),
  load_format: z.string().nullable().optional(),
  abort_all_requests: z.boolean().optional(),
  weight_version: z.string().nullable().optional(),
  is_async: z.boolean().optional(),
  torch_empty_cache: z.boolean().optional(),
  keep_pause: z.boolean().optional(),
  recapture_cuda_graph: z.boolean().optional(),
  token_step: int.optional(),
  flush_cache: z.boolean().optional(),
});

export interface SglangServerOptions {
  /** Report meta_info.weight_version(s), as current SGLang does; off: an older server that reports neither. */
  reportVersions?: boolean;
}

export function sglangApp(engine: EngineDouble, opts: SglangServerOptions = {}): FastifyInstance {
  const app = Fastify({ forceCloseConnections: true });
  loraRoutes(app, engine);
  app.get("/metrics", async (_req, reply) => (engine.metrics === null ? reply.code(404).send() : reply.type("text/plain").send(engine.metrics)));
  app.get("/health", async (_req, reply) => reply.code(engine.unhealthy ? 503 : 200).send());
  app.post("/generate", async (req, reply) => {
    engine.received.push({ route: "/generate", body: req.body });
    const parsed = GenerateReqInput.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send({ object: "error", message: parsed.error.message, code: 400 });
    const b = parsed.data;
    if (b.lora_path != null && !engine.adapters.has(b.lora_path))
      return reply.code(400).send({ object: "error", message: `The following requested LoRA adapters are not loaded: ${b.lora_path}`, code: 400 });
    engine.adapterOfRequests.push(b.lora_path ?? null);
    const sp = b.sampling_params;
    const r = await engine.run(b.input_ids, sp.max_new_tokens ?? 128, sp.stop_token_ids ?? [], sp.sampling_seed ?? 0, {
      temperature: sp.temperature ?? 1,
      topP: sp.top_p ?? 1,
      topK: sp.top_k === undefined || sp.top_k === -1 ? 0 : sp.top_k,
    });
    const finish_reason =
      r.finish === "stop"
        ? { type: "stop", matched: r.matched }
        : r.finish === "length"
          ? { type: "length", length: r.tokens.length }
          : { type: "abort", message: "Abort in waiting queue" };
    const versions = opts.reportVersions === false ? {} : { weight_version: engine.label, weight_versions: r.spans };
    return {
      text: "",
      output_ids: r.tokens,
      meta_info: {
        id: b.rid ?? "rid",
        finish_reason,
        prompt_tokens: b.input_ids.length,
        completion_tokens: r.tokens.length,
        cached_tokens: 0,
        output_token_logprobs: b.return_logprob ? r.tokens.map((t, i) => [r.logprobs[i], t, null]) : undefined,
        ...versions,
      },
    };
  });
  app.post("/update_weights_from_disk", async (req, reply) => {
    engine.received.push({ route: "/update_weights_from_disk", body: req.body });
    const parsed = UpdateWeightFromDiskReqInput.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send({ object: "error", message: parsed.error.message, code: 400 });
    const b = parsed.data;
    // Requests in flight end now (abort_all_requests) or are waited for; new ones wait for the load.
    const paused = b.abort_all_requests ? engine.abortAll() : 0;
    if (!b.abort_all_requests) await engine.drain();
    engine.hold();
    try {
      await engine.load(b.model_path, b.weight_version ?? null);
      const message = `Succeeded to update model weights.${b.weight_version ? ` Weight version updated to ${b.weight_version}.` : ""}`;
      return { success: true, message, num_paused_requests: paused };
    } catch (e) {
      return reply.code(400).send({ success: false, message: (e as Error).message, num_paused_requests: paused });
    } finally {
      engine.release();
    }
  });
  app.post("/pause_generation", async (req) => {
    const mode = (req.body as { mode?: string } | undefined)?.mode ?? "abort";
    if (mode === "abort") engine.abortAll();
    engine.hold();
    return { message: "Generation paused successfully.", status: "ok" };
  });
  app.post("/continue_generation", async () => {
    engine.release();
    return { message: "Generation continued successfully.", status: "ok" };
  });
  return app;
}
