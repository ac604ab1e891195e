// SGLang's native HTTP API, as sgl-project/sglang serves it (python/sglang/srt/entrypoints/http_server.py,
// managers/io_struct.py GenerateReqInput / UpdateWeightFromDiskReqInput, sampling/sampling_params.py,
// utils/weight_versions.py): POST /generate with input_ids and return_logprob, POST /update_weights_from_disk,
// GET /health. No plugin is needed on the server. LoRA adapters (http_server.py @9c0549b /load_lora_adapter and
// /unload_lora_adapter; io_struct.py @001067f LoadLoRAAdapterReqInput {lora_name, lora_path, pinned, lora_id},
// UnloadLoRAAdapterReqInput {lora_name, lora_id}, LoRAUpdateOutput {success, error_message, loaded_adapters}, 400 when
// success is false; GenerateReqInput.lora_path names the adapter of a request), on a server started --enable-lora.
import { z } from "zod";
import { type EngineServer, type Segment, type SegmentRequest, spansOfLabels, versionOfLabel } from "./engine-server.js";
import { callJson, RequestRejected, ServerDown } from "./http.js";
import { fetchLoad, LOAD_GAUGES, type ServerLoad } from "./server-load.js";

const int = z.number().int();

/** meta_info.finish_reason: FINISH_MATCHED_TOKEN / _STR ({type: stop, matched}), FINISH_LENGTH, FINISH_ABORT. */
const FinishReason = z.object({ type: z.enum(["stop", "length", "abort"]), matched: z.unknown().optional(), message: z.unknown().optional() }).nullable();

export const SglangGenerateResponse = z.object({
  meta_info: z.object({
    id: z.string().optional(),
    finish_reason: FinishReason,
    prompt_tokens: int.optional(),
    completion_tokens: int.optional(),
    /** [logprob, token_id, text | null] per output token. */
    output_token_logprobs: z.array(z.tuple([z.number(), int.nonnegative(), z.string().nullable()])),
    weight_version: z.string().nullable().optional(),
    weight_versions: z
      .array(z.object({ version: z.string(), start: int, end: int }))
      .nullable()
      .optional(),
  }),
  output_ids: z.array(int).optional(),
});

const LoraUpdateOutput = z.object({ success: z.boolean(), error_message: z.string().nullable().optional(), loaded_adapters: z.unknown().optional() });

const UpdateResponse = z.object({ success: z.boolean(), message: z.string().optional(), num_paused_requests: int.nullable().optional() });

/** The /generate body for one segment (exported for the protocol tests). */
export function sglangGenerateBody(req: SegmentRequest): Record<string, unknown> {
  return {
    rid: req.requestId,
    input_ids: req.tokenIds,
    sampling_params: {
      max_new_tokens: req.maxTokens,
      temperature: req.temperature,
      top_p: req.topP,
      // SGLang's "off" is -1 (0 is rejected).
      top_k: req.topK > 0 ? req.topK : -1,
      stop_token_ids: req.stopTokenIds,
      sampling_seed: req.seed,
    },
    return_logprob: true,
    // Only the output tokens' logprobs (the default, said so: a prompt's would cost a full forward).
    logprob_start_len: -1,
    stream: false,
    extra_key: req.cacheKey,
    ...(req.adapter ? { lora_path: req.adapter } : {}),
  };
}

export function segmentOfSglang(url: string, res: z.output<typeof SglangGenerateResponse>): Segment {
  const m = res.meta_info;
  const tokenIds = m.output_token_logprobs.map((x) => x[1]);
  if (res.output_ids && (res.output_ids.length !== tokenIds.length || res.output_ids.some((t, i) => t !== tokenIds[i]))) {
    throw new ServerDown(url, "output_ids and meta_info.output_token_logprobs disagree");
  }
  // A request aborted before its first step comes back without a finish reason's tokens: resubmit it.
  const finish = m.finish_reason?.type ?? "abort";
  const spans = spansOfLabels(m.weight_versions);
  const single = versionOfLabel(m.weight_version);
  const versionSpans = spans ?? (single !== null && tokenIds.length > 0 ? [{ version: single, start: 0, end: tokenIds.length }] : undefined);
  return { tokenIds, logprobs: m.output_token_logprobs.map((x) => x[0]), finish, versionSpans };
}

export class SglangServer implements EngineServer {
  /** abortAll: send abort_all_requests (see loadWeights); `rollstream serve` keeps its requests going instead. */
  constructor(
    readonly url: string,
    private readonly o: { abortAll: boolean } = { abortAll: true },
  ) {}

  async generate(req: SegmentRequest, opts: { deadlineMs: number; signal?: AbortSignal }): Promise<Segment> {
    const res = await callJson(`${this.url}/generate`, sglangGenerateBody(req), SglangGenerateResponse, opts);
    return segmentOfSglang(this.url, res);
  }

  /**
   * abort_all_requests: requests in flight end at once with finish_reason abort and their partial output, which
   * the fleet resubmits under the new weights (each part stamped with its version), rather than the update
   * waiting for the longest generation to finish.
   */
  async loadWeights(dir: string, version: number | string, opts: { deadlineMs: number }): Promise<void> {
    const body = { model_path: dir, weight_version: String(version), abort_all_requests: this.o.abortAll };
    const res = await callJson(`${this.url}/update_weights_from_disk`, body, UpdateResponse, opts).catch((e: unknown) => {
      // A failed load answers 400 with {success: false, message}: still the server's failure to serve the version.
      throw e instanceof ServerDown ? e : new ServerDown(this.url, (e as Error).message);
    });
    if (!res.success) throw new ServerDown(this.url, `update_weights_from_disk failed: ${res.message ?? "(no message)"}`);
  }

  /** A name loaded already (a retry after an answer that was lost) counts as loaded: versions never reuse a name. */
  async loadAdapter(name: string, dir: string, opts: { deadlineMs: number }): Promise<void> {
    const res = await this.loraCall("/load_lora_adapter", { lora_name: name, lora_path: dir }, opts);
    if (!res.success && !/already (been )?loaded|already exists/i.test(res.error_message ?? ""))
      throw new ServerDown(this.url, `load_lora_adapter ${name} failed: ${res.error_message ?? "(no message)"}`);
  }

  /** Unloading an adapter the server does not have (it restarted since) is no failure. */
  async unloadAdapter(name: string, opts: { deadlineMs: number }): Promise<void> {
    await this.loraCall("/unload_lora_adapter", { lora_name: name }, opts);
  }

  /** LoRAUpdateOutput, whether the server answered 200 or (success false) 400. */
  private async loraCall(route: string, body: object, opts: { deadlineMs: number }): Promise<z.output<typeof LoraUpdateOutput>> {
    return callJson(`${this.url}${route}`, body, LoraUpdateOutput, opts).catch((e: unknown) => {
      if (!(e instanceof RequestRejected)) throw e;
      let json: unknown = null;
      try {
        json = JSON.parse(e.body);
      } catch {}
      const parsed = LoraUpdateOutput.safeParse(json);
      if (parsed.success) return parsed.data;
      throw new ServerDown(this.url, e.message);
    });
  }

  load(opts: { deadlineMs: number }): Promise<ServerLoad | null> {
    return fetchLoad(this.url, LOAD_GAUGES.sglang, opts.deadlineMs);
  }

  async healthy(opts: { deadlineMs: number }): Promise<boolean> {
    return callJson(`${this.url}/health`, undefined, z.unknown(), opts).then(
      () => true,
      () => false,
    );
  }
}
