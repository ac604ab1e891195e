// What the fleet needs from one external inference server, whatever protocol it speaks: continue a token
// prefix (one segment of a generation), load a policy version from an HF folder, and say whether it is up.
// Token ids in, token ids and the sampler's logprobs out: nothing is re-tokenised.
import type { VersionSpan } from "../../../environments/api/model.js";
import type { ServerLoad } from "./server-load.js";

export interface SegmentRequest {
  /** Unique per HTTP request (a retry or a resubmitted remainder gets a new one). */
  requestId: string;
  /** The prompt, plus any tokens an aborted earlier segment of the same generation produced. */
  tokenIds: number[];
  maxTokens: number;
  temperature: number;
  topP: number;
  /** 0: off. */
  topK: number;
  seed: number;
  stopTokenIds: number[];
  /** Prefix-cache namespace: run and policy version, so KV computed under old weights is never reused. */
  cacheKey: string;
  /** The LoRA adapter the request is for (vLLM `model`, SGLang `lora_path`); absent: the server's own weights. */
  adapter?: string;
}

export interface Segment {
  tokenIds: number[];
  logprobs: number[];
  /** stop: a stop token (or a stop the server matched); length: maxTokens; abort: cut short (a pause or update), resubmit the rest. */
  finish: "stop" | "length" | "abort";
  /**
   * Which weights sampled which of this segment's tokens, as the server reported them (SGLang meta_info and vLLM
   * choices[].weight_versions), when every label was one of our integer versions; else absent.
   */
  versionSpans?: VersionSpan[];
}

export interface EngineServer {
  readonly url: string;
  generate(req: SegmentRequest, opts: { deadlineMs: number; signal?: AbortSignal }): Promise<Segment>;
  /**
   * Loads the HF folder `dir` labelled `version` (a policy version, or a LoRA base's label); resolves once the
   * server serves it, throws otherwise.
   */
  loadWeights(dir: string, version: number | string, opts: { deadlineMs: number }): Promise<void>;
  /** Loads the PEFT adapter folder `dir` under `name` (requests then name it); resolves once requests may. */
  loadAdapter?(name: string, dir: string, opts: { deadlineMs: number }): Promise<void>;
  /** Unloads adapter `name` (an older version no request of ours names any more). */
  unloadAdapter?(name: string, opts: { deadlineMs: number }): Promise<void>;
  healthy(opts: { deadlineMs: number }): Promise<boolean>;
  /** Its queue and KV figures from /metrics (null when it exports none): the fleet sizes its in-flight cap by them. */
  load?(opts: { deadlineMs: number }): Promise<ServerLoad | null>;
}

/**
 * A server's weight-version label as one of our versions: "<n>" (a full-weight load), or "<run>-v<n>" (a LoRA
 * adapter's name, as `rollstream serve` labels the weights it merged from it); null when it is neither (a server
 * started with another label, or a LoRA base's label).
 */
export function versionOfLabel(label: string | null | undefined): number | null {
  const m = label == null ? null : /^(?:(\d{1,9})|.+-v(\d{1,9}))$/.exec(label);
  return m ? Number(m[1] ?? m[2]) : null;
}

/** The name a policy version's adapter is loaded under (vLLM lora_name / model, SGLang lora_name / lora_path). */
export function adapterName(run: string, version: number): string {
  return `${run}-v${version}`;
}

/** Server spans `{version: "<n>", start, end}` as ours, or undefined when any label is not one of our versions. */
export function spansOfLabels(spans: readonly { version: string; start: number; end: number }[] | null | undefined): VersionSpan[] | undefined {
  if (!spans || spans.length === 0) return undefined;
  const out: VersionSpan[] = [];
  for (const s of spans) {
    const version = versionOfLabel(s.version);
    if (version === null) return undefined;
    out.push({ version, start: s.start, end: s.end });
  }
  return out;
}
