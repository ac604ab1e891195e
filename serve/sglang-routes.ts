// SGLang's native routes, as sgl-project/sglang serves them (python/sglang/srt/entrypoints/http_server.py;
// managers/io_struct.py GenerateReqInput, UpdateWeightFromDiskReqInput, PauseGenerationReqInput;
// sampling/sampling_params.py): POST /generate (input_ids or text, sampling_params{max_new_tokens, temperature,
// top_p, top_k, stop, stop_token_ids, ignore_eos, sampling_seed}, return_logprob → meta_info.output_token_logprobs
// [logprob, token_id, text|null], output_top_logprobs with top_logprobs_num, finish_reason {type, matched|length|message}, weight_version, weight_versions),
// POST /update_weights_from_disk {model_path, weight_version, abort_all_requests, ...} → {success, message,
// num_paused_requests}, /pause_generation {mode}, /continue_generation, GET /get_weight_version.
// sampling_params.n > 1: a list of n results (sample i with sampling_seed + i), as SGLang answers a single input with
// n samples. stream: true: server-sent events `data: {text, output_ids, meta_info}` after each token, cumulative as
// SGLang streams by default (tokenizer_manager.py without incremental_streaming_output), finish_reason null until the
// last, then `data: [DONE]` (http_server.py stream_results). Not served here: batched inputs, and n > 1 streamed (400).
import { randomUUID } from "node:crypto";
import type { FastifyInstance, FastifyReply } from "fastify";
import { z } from "zod";
import type { ModelConfig } from "../kernels/model-config.js";
import type { Tokenizer } from "../kernels/tokenizer.js";
import { BadRequest, parseWith } from "./http-errors.js";
import type { PolicyTokenEngine } from "./policy-token-engine.js";
import { callerGone, SseStream } from "./sse.js";
import { textChoice } from "./text-choices.js";
import { labelSpans, type TokenRequest, type TokenResult } from "./token-engine.js";
import { checkPrompt } from "./vllm-generate-route.js";
import { folderWeights } from "./weight-loads.js";

const int = z.number().int();

export const SglangSamplingParams = z.object({
  // SGLang's default.
  max_new_tokens: int.min(0).default(128),
  temperature: z.number().min(0).default(1),
  top_p: z.number().gt(0).max(1).default(1),
  top_k: int.refine((k) => k === -1 || k >= 1, "top_k must be -1 (off) or at least 1").default(-1),
  min_p: z.literal(0).optional(),
  stop: z
    .union([z.string(), z.array(z.string().min(1))])
    .nullable()
    .optional(),
  stop_token_ids: z.array(int.min(0)).nullable().optional(),
  ignore_eos: z.boolean().default(false),
  sampling_seed: int.min(0).nullable().optional(),
  skip_special_tokens: z.boolean().optional(),
  n: int.min(1).max(64).default(1),
});

export const GenerateReqInput = z
  .object({
    rid: z.string().min(1).max(256).nullable().optional(),
    text: z.string().min(1).nullable().optional(),
    input_ids: z.array(int.min(0)).min(1, "input_ids is empty").nullable().optional(),
    sampling_params: SglangSamplingParams.default(SglangSamplingParams.parse({})),
    return_logprob: z.boolean().default(false),
    logprob_start_len: z.literal(-1, { message: "only output logprobs are served (logprob_start_len -1)" }).optional(),
    // With return_logprob: meta_info.output_top_logprobs[i] = the k most likely [logprob, token_id, text|null].
    top_logprobs_num: int.min(0).max(20).default(0),
    return_text_in_logprobs: z.boolean().default(false),
    stream: z.boolean().default(false),
    extra_key: z.string().min(1).nullable().optional(),
    // GenerateReqInput.lora_path: the name of a loaded LoRA adapter (SGLang's /load_lora_adapter; here vLLM's route).
    lora_path: z.string().min(1).nullable().optional(),
  })
  .refine((b) => (b.text == null) !== (b.input_ids == null), { message: "give exactly one of text or input_ids", path: ["input_ids"] });

export const UpdateWeightFromDiskReqInput = z.object({
  model_path: z.string().min(1),
  load_format: z
    .union([z.literal("auto"), z.literal("safetensors")])
    .nullable()
    .optional(),
  abort_all_requests: z.boolean().default(false),
  weight_version: z.string().min(1).nullable().optional(),
  is_async: z.boolean().optional(),
  torch_empty_cache: z.boolean().optional(),
  keep_pause: z.boolean().optional(),
  recapture_cuda_graph: z.boolean().optional(),
  token_step: int.optional(),
  flush_cache: z.boolean().optional(),
});

export interface SglangDeps {
  engine: PolicyTokenEngine;
  tokenizer: Tokenizer;
  modelConfig: ModelConfig;
  models?: { check(model: string | null | undefined, field?: string): void };
}

function finishReasonOf(c: ReturnType<typeof textChoice>) {
  if (c.finishReason === "length") return { type: "length", length: c.tokenIds.length };
  if (c.finishReason === "abort") return { type: "abort", message: "aborted by a weight update or pause" };
  return { type: "stop", matched: c.stopReason ?? c.tokenIds[c.tokenIds.length - 1] ?? null };
}

type Generate = z.output<typeof GenerateReqInput>;

/** One result object of /generate: text, output_ids and meta_info (finish_reason null while it streams). */
function resultOf(d: SglangDeps, b: Generate, promptLen: number, rid: string, r: TokenResult, finish: ReturnType<typeof finishReasonOf> | null) {
  const text = (t: number) => (b.return_text_in_logprobs ? d.tokenizer.decode([t]) : null);
  const tops = b.top_logprobs_num > 0 ? { output_top_logprobs: (r.topLogprobs ?? []).map((top) => top.map((x) => [x.logprob, x.token, text(x.token)])) } : {};
  const logprobs = b.return_logprob ? { output_token_logprobs: r.tokenIds.map((t, i) => [r.logprobs[i], t, text(t)]), ...tops } : {};
  return {
    text: d.tokenizer.decode(r.tokenIds, { skipSpecial: true }),
    output_ids: r.tokenIds,
    meta_info: {
      id: rid,
      finish_reason: finish,
      prompt_tokens: promptLen,
      completion_tokens: r.tokenIds.length,
      cached_tokens: 0,
      ...logprobs,
      weight_version: r.versions[r.versions.length - 1] ?? d.engine.version,
      weight_versions: labelSpans(r.versions),
    },
  };
}

/** The TokenRequest of a parsed body (sample i of n: its own request id, sampling_seed + i). */
function tokenRequestOf(b: Generate, ids: number[], rid: string, signal: AbortSignal, i: number): TokenRequest {
  const sp = b.sampling_params;
  const stop = sp.stop == null ? [] : typeof sp.stop === "string" ? [sp.stop] : sp.stop;
  return {
    requestId: sp.n > 1 ? `${rid}-${i}` : rid,
    promptIds: ids,
    maxTokens: sp.max_new_tokens,
    temperature: sp.temperature,
    topP: sp.top_p,
    topK: Math.max(0, sp.top_k),
    ...(sp.sampling_seed == null ? {} : { seed: sp.sampling_seed + i }),
    stopTokenIds: sp.stop_token_ids ?? [],
    ignoreEos: sp.ignore_eos,
    stop,
    ...(b.extra_key == null ? {} : { cacheSalt: b.extra_key }),
    ...(b.return_logprob && b.top_logprobs_num > 0 ? { topLogprobs: b.top_logprobs_num } : {}),
    signal,
  };
}

export function registerSglangRoutes(app: FastifyInstance, d: SglangDeps): void {
  app.post("/generate", async (req, reply) => {
    const b = parseWith(GenerateReqInput, req.body, "body");
    d.models?.check(b.lora_path, "lora_path");
    const sp = b.sampling_params;
    const ids = b.input_ids ?? d.tokenizer.encode(b.text!);
    checkPrompt(d.engine, ids, b.input_ids ? "input_ids" : "text");
    if (sp.max_new_tokens === 0) throw new BadRequest("sampling_params.max_new_tokens: 0 generates nothing (prefill-only requests are not served)");
    if (b.stream && sp.n > 1) throw new BadRequest("sampling_params.n: a stream serves one sample (n 1)");
    const rid = b.rid ?? randomUUID();
    const stopOf = (tr: TokenRequest) => ({ stop: tr.stop ?? [], stopTokenIds: tr.stopTokenIds });
    if (b.stream) return streamGenerate(reply, d, b, ids, tokenRequestOf(b, ids, rid, callerGone(reply), 0));
    const signal = callerGone(reply);
    // Started in one turn, so the engine admits them together: one prefill of the prompt for all n.
    const results = await Promise.all(
      Array.from({ length: sp.n }, async (_, i) => {
        const tr = tokenRequestOf(b, ids, rid, signal, i);
        const r = await d.engine.generate(tr);
        const c = textChoice(d.tokenizer, r, stopOf(tr));
        return { ...resultOf(d, b, ids.length, tr.requestId, r, finishReasonOf(c)), text: c.text };
      }),
    );
    return sp.n > 1 ? results : results[0];
  });
  registerSglangWeightRoutes(app, d);
}

/** `data: <result so far>` after each token (cumulative, finish_reason null), the finished result, `data: [DONE]`. */
async function streamGenerate(reply: FastifyReply, d: SglangDeps, b: Generate, ids: number[], tr: TokenRequest): Promise<void> {
  const sse = new SseStream(reply);
  const sofar: TokenResult = { tokenIds: [], logprobs: [], versions: [], finish: "length" };
  try {
    const r = await d.engine.generate({
      ...tr,
      onToken: (t) => {
        if (t.top) (sofar.topLogprobs ??= []).push(t.top);
        sofar.tokenIds.push(t.tokenId);
        sofar.logprobs.push(t.logprob);
        sofar.versions.push(t.version);
        sse.send(resultOf(d, b, ids.length, tr.requestId, sofar, null));
      },
    });
    const c = textChoice(d.tokenizer, r, { stop: tr.stop ?? [], stopTokenIds: tr.stopTokenIds });
    sse.send({ ...resultOf(d, b, ids.length, tr.requestId, r, finishReasonOf(c)), text: c.text });
    sse.end();
  } catch (e) {
    sse.fail((e as Error).message);
  }
}

function registerSglangWeightRoutes(app: FastifyInstance, d: SglangDeps): void {
  app.post("/update_weights_from_disk", async (req, reply) => {
    const b = parseWith(UpdateWeightFromDiskReqInput, req.body, "body");
    try {
      const bytes = await folderWeights(b.model_path, d.modelConfig);
      const label = b.weight_version ?? d.engine.version;
      const rec = await d.engine.load(bytes, label, { abortAll: b.abort_all_requests, source: b.model_path });
      const message = `Succeeded to update model weights.${b.weight_version ? ` Weight version updated to ${b.weight_version}.` : ""}`;
      return { success: true, message, num_paused_requests: rec.aborted };
    } catch (e) {
      // SGLang answers a failed load with 400 and success: false; the old weights stay in use.
      return reply.code(400).send({ success: false, message: (e as Error).message.replace(/\s+/g, " "), num_paused_requests: 0 });
    }
  });
  app.post("/pause_generation", async (req) => {
    const b = parseWith(z.object({ mode: z.enum(["abort", "retract", "in_place"]).default("abort") }), req.body, "body");
    // retract and in_place keep the requests, to go on after /continue_generation: keep here.
    await d.engine.pause(b.mode === "abort" ? "abort" : "keep");
    return { message: "Generation paused successfully.", status: "ok" };
  });
  app.post("/continue_generation", async () => {
    d.engine.resume();
    return { message: "Generation continued successfully.", status: "ok" };
  });
  app.get("/get_weight_version", async () => ({ weight_version: d.engine.version }));
}
