// vLLM's token-in / token-out route, as vllm-project/vllm serves it: POST /inference/v1/generate
// (entrypoints/scale_out/token_in_token_out/protocol.py GenerateRequest / GenerateTokensResponse,
// outputs.py WeightVersionSpan), and the RL control routes of entrypoints/serve/dev/rlhf/api_router.py
// (/pause?mode=, /resume, /update_weight_version). Upstream vLLM has no route that reloads full weights from a
// folder: the reload goes to `weightsRoute` (POST {weight_dir}), which deploy/vllm/serve.py and its worker extension
// serve (PRIME-RL's shape; test/deploy/vllm-extension.test.ts holds that launcher's routes to what loadWeights sends).
// `rollstream serve` speaks this generate route and loads weights through SGLang's.
// LoRA adapters (vllm/frontend/entrypoints/serve/lora/api_router.py and openai/models/serving.py @055e47c, served
// with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True): POST /v1/load_lora_adapter {lora_name, lora_path} answers 200 with a
// text body, 400 when the name is loaded already; POST /v1/unload_lora_adapter {lora_name}, 404 when it is not
// loaded; a generate request names the adapter as `model`. One name per version, never load_inplace (see PROTOCOLS).
import { z } from "zod";
import { type EngineServer, type Segment, type SegmentRequest, spansOfLabels } from "./engine-server.js";
import { call, callJson, RequestRejected, ServerDown } from "./http.js";
import { SglangServer } from "./sglang.js";
import { fetchLoad, LOAD_GAUGES, type LoadGauges, type ServerLoad } from "./server-load.js";

const int = z.number().int();

const Choice = z.object({
  index: int,
  finish_reason: z.string().nullable().optional(),
  token_ids: z.array(int.nonnegative()).nullable().optional(),
  logprobs: z
    .object({
      content: z
        .array(z.object({ token_id: int, logprob: z.number() }))
        .nullable()
        .optional(),
    })
    .nullable()
    .optional(),
  weight_versions: z
    .array(z.object({ version: z.string(), start: int, end: int }))
    .nullable()
    .optional(),
});

export const VllmGenerateResponse = z.object({
  request_id: z.string().optional(),
  choices: z.array(Choice).min(1),
  prompt_token_ids: z.array(int).nullable().optional(),
});

/** The /inference/v1/generate body for one segment (exported for the protocol tests). */
export function vllmGenerateBody(req: SegmentRequest): Record<string, unknown> {
  return {
    request_id: req.requestId,
    token_ids: req.tokenIds,
    sampling_params: {
      // Always sent: an omitted max_tokens is defaulted by the server, not by us.
      max_tokens: req.maxTokens,
      temperature: req.temperature,
      top_p: req.topP,
      top_k: req.topK,
      // 0: the sampled token's own logprob, no alternatives.
      logprobs: 0,
      seed: req.seed,
      stop_token_ids: req.stopTokenIds,
    },
    cache_salt: req.cacheKey,
    ...(req.adapter ? { model: req.adapter } : {}),
    // The server echoes the prompt it continued, which is checked against ours.
    return_token_ids: true,
    output_mode: "tokens",
    stream: false,
  };
}

export function segmentOfVllm(url: string, sent: number[], res: z.output<typeof VllmGenerateResponse>, index = 0): Segment {
  const c = res.choices[index]!;
  const tokenIds = c.token_ids ?? [];
  const content = c.logprobs?.content ?? [];
  if (content.length !== tokenIds.length || content.some((x, i) => x.token_id !== tokenIds[i])) {
    throw new ServerDown(url, `choices[0].logprobs.content (${content.length}) does not match choices[0].token_ids (${tokenIds.length})`);
  }
  const echoed = res.prompt_token_ids;
  if (echoed && (echoed.length !== sent.length || echoed.some((t, i) => t !== sent[i]))) {
    throw new ServerDown(url, "prompt_token_ids differ from the token_ids sent");
  }
  const r = c.finish_reason;
  const finish = r === "length" ? "length" : r === "abort" || r == null ? "abort" : "stop";
  return { tokenIds, logprobs: content.map((x) => x.logprob), finish, versionSpans: spansOfLabels(c.weight_versions) };
}

export interface VllmOptions {
  pauseMode: "abort" | "wait" | "keep";
  weightsRoute: string;
}

export class VllmServer implements EngineServer {
  constructor(
    readonly url: string,
    private readonly opts: VllmOptions,
  ) {}

  async generate(req: SegmentRequest, opts: { deadlineMs: number; signal?: AbortSignal }): Promise<Segment> {
    const res = await callJson(`${this.url}/inference/v1/generate`, vllmGenerateBody(req), VllmGenerateResponse, opts);
    return segmentOfVllm(this.url, req.tokenIds, res);
  }

  /** n samples of one request (SamplingParams.n): one prompt, one prefill; choice i in order. */
  async generateMany(req: SegmentRequest, n: number, opts: { deadlineMs: number; signal?: AbortSignal }): Promise<Segment[]> {
    const body = vllmGenerateBody(req);
    (body.sampling_params as Record<string, unknown>).n = n;
    const res = await callJson(`${this.url}/inference/v1/generate`, body, VllmGenerateResponse, opts);
    if (res.choices.length !== n) throw new ServerDown(this.url, `asked for n=${n} choices, got ${res.choices.length}`);
    return res.choices.map((_, i) => segmentOfVllm(this.url, req.tokenIds, res, i));
  }

  /** Pause, reload from the folder, label the weights with our version, resume: always resumed, even after a failure. */
  async loadWeights(dir: string, version: number | string, opts: { deadlineMs: number }): Promise<void> {
    await call(`${this.url}/pause?mode=${this.opts.pauseMode}`, {}, opts);
    try {
      await call(`${this.url}${this.opts.weightsRoute}`, { weight_dir: dir }, opts).catch((e: unknown) => {
        throw e instanceof RequestRejected ? new ServerDown(this.url, e.message) : e;
      });
      // Labels weight_versions spans with our version; a server without the dev routes (404) just reports none.
      await call(`${this.url}/update_weight_version`, { new_version: String(version) }, opts).catch((e: unknown) => {
        if (!(e instanceof RequestRejected && e.status === 404)) throw e;
      });
    } finally {
      await call(`${this.url}/resume`, {}, opts).catch(() => undefined);
    }
  }

  /** A name loaded already (a retry after an answer that was lost) counts as loaded: versions never reuse a name. */
  async loadAdapter(name: string, dir: string, opts: { deadlineMs: number }): Promise<void> {
    await call(`${this.url}/v1/load_lora_adapter`, { lora_name: name, lora_path: dir }, opts).catch((e: unknown) => {
      if (e instanceof RequestRejected && e.status === 400 && /already been loaded/.test(e.message)) return;
      throw e instanceof RequestRejected ? new ServerDown(this.url, e.message) : e;
    });
  }

  /** An adapter the server does not have (404: it restarted since) is unloaded already. */
  async unloadAdapter(name: string, opts: { deadlineMs: number }): Promise<void> {
    await call(`${this.url}/v1/unload_lora_adapter`, { lora_name: name }, opts).catch((e: unknown) => {
      if (!(e instanceof RequestRejected && e.status === 404)) throw e;
    });
  }

  load(opts: { deadlineMs: number }): Promise<ServerLoad | null> {
    return fetchLoad(this.url, this.gauges, opts.deadlineMs);
  }

  protected get gauges(): LoadGauges {
    return LOAD_GAUGES.vllm;
  }

  async healthy(opts: { deadlineMs: number }): Promise<boolean> {
    return call(`${this.url}/health`, undefined, opts).then(
      () => true,
      () => false,
    );
  }
}

/**
 * `rollstream serve`: vLLM's generate route, SGLang's update_weights_from_disk without abort_all_requests: its
 * engine applies new weights at the next step boundary to the requests in flight too (in-flight update, its
 * weightUpdate mode), and each answer's weight_versions spans say which version sampled which token, so nothing is
 * aborted and generated again.
 */
export class RollstreamServer extends VllmServer {
  private readonly disk: SglangServer;

  constructor(url: string, opts: VllmOptions) {
    super(url, opts);
    this.disk = new SglangServer(url, { abortAll: false });
  }

  override loadWeights(dir: string, version: number | string, opts: { deadlineMs: number }): Promise<void> {
    return this.disk.loadWeights(dir, version, opts);
  }

  protected override get gauges(): LoadGauges {
    return LOAD_GAUGES.rollstream;
  }
}
