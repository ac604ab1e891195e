// `rollstream serve`'s engine: the TokenEngine of the generate routes over a PolicyEngine (continuous batching,
// shared prefixes, in-flight weight updates), plus what the control routes drive: pause modes, aborts, and
// weight loads labelled with a caller's version string. Labels are what the wire carries (SGLang weight_version,
// vLLM WeightVersionSpan.version); the engine itself numbers its weights 0, 1, 2, ... in load order, and each
// token's number maps back to the label its weights were loaded with. Every load is kept in the update log.
import { createHash } from "node:crypto";
import type { PolicyEngine } from "../actors/runtime/policy-engine.js";
import type { TokenEngine, TokenRequest, TokenResult } from "./token-engine.js";

export interface WeightUpdateRecord {
  /** The label the weights were loaded with. */
  version: string;
  /** Where they came from (a folder, an object-store version, the startup source). */
  source: string;
  /** When they were in use (ms since the epoch). */
  at: number;
  /** How long the load took, from the request to the weights being in use. */
  ms: number;
  /** Requests ended with their partial output to make way for it (abort_all_requests). */
  aborted: number;
}

export class PolicyTokenEngine implements TokenEngine {
  readonly limits: { vocabSize: number; contextTokens: number };
  /** Label of each engine weights number. */
  private readonly labelOfNumber: string[] = [];
  readonly updates: WeightUpdateRecord[] = [];
  /** Weight loads run one at a time, in arrival order. */
  private loading: Promise<unknown> = Promise.resolve();
  requestsServed = 0;

  private readonly onUpdate: (r: WeightUpdateRecord) => void;
  /** The weights LoRA adapters merge into: the last full-weight load's bytes, else the startup weights. */
  private baseBytes: Uint8Array | null = null;
  private readonly base: () => Uint8Array | null;

  /** What a LoRA adapter is merged into (serve/lora-routes.ts); waits for the weight loads queued before. */
  async baseWeights(): Promise<Uint8Array> {
    await this.loading;
    const b = this.baseBytes ?? this.base();
    if (!b) throw new Error("no base weights to merge an adapter into");
    return b;
  }

  constructor(
    readonly engine: PolicyEngine,
    opts: {
      vocabSize: number;
      contextTokens: number;
      label: string;
      source: string;
      onUpdate?(r: WeightUpdateRecord): void;
      /** The startup weights as safetensors (the LoRA base until a full-weight load replaces it); read once, when first needed. */
      startupWeights?(): Uint8Array;
    },
  ) {
    const startup = opts.startupWeights;
    this.base = startup ? () => (this.baseBytes ??= startup()) : () => null;
    this.limits = { vocabSize: opts.vocabSize, contextTokens: opts.contextTokens };
    this.labelOfNumber[engine.version] = opts.label;
    this.onUpdate = opts.onUpdate ?? (() => undefined);
    this.record({ version: opts.label, source: opts.source, at: Date.now(), ms: 0, aborted: 0 });
  }

  private record(r: WeightUpdateRecord): void {
    this.updates.push(r);
    this.onUpdate(r);
  }

  /** The label of the weights in use. */
  get version(): string {
    return this.labelOf(this.engine.version);
  }

  get paused(): boolean {
    return this.engine.paused;
  }

  async generate(req: TokenRequest): Promise<TokenResult> {
    const onToken = req.onToken;
    const out = await this.engine.submit(req.promptIds, {
      args: { temperature: req.temperature, topP: req.topP, topK: req.topK, maxTokens: req.maxTokens, ...(req.stop?.length ? { stop: req.stop } : {}) },
      seed: req.seed,
      stopTokenIds: req.stopTokenIds,
      ignoreEos: req.ignoreEos,
      cacheSalt: req.cacheSalt === undefined ? undefined : saltOf(req.cacheSalt),
      signal: req.signal,
      ...(req.topLogprobs ? { topLogprobs: req.topLogprobs } : {}),
      ...(onToken
        ? {
            onToken: (t: { token: number; logprob: number; version: number; top?: { token: number; logprob: number }[] }) =>
              onToken({ tokenId: t.token, logprob: t.logprob, version: this.labelOf(t.version), ...(t.top ? { top: t.top } : {}) }),
          }
        : {}),
    });
    this.requestsServed++;
    const finish = out.finish === "abort" ? "abort" : out.finish === "length" || out.finish === "context" ? "length" : "stop";
    const tops = out.topLogprobs ? { topLogprobs: out.topLogprobs } : {};
    return { tokenIds: out.tokenIds, logprobs: out.logprobs, versions: out.versions.map((v) => this.labelOf(v)), finish, ...tops };
  }

  pause(mode: "keep" | "abort" | "wait"): Promise<number> {
    return this.engine.pause(mode);
  }

  resume(): void {
    this.engine.resume();
  }

  /**
   * Loads `safetensors` as version `label`; resolves once they are in use. abortAll: requests in flight end now
   * with their partial output (finish "abort"), as SGLang's abort_all_requests; else they go on, their later tokens
   * under the new weights (the engine's weightUpdate mode), and their spans say so. adapter: the bytes are a LoRA
   * adapter merged into the base, which they do not replace as the base.
   */
  load(bytes: () => Promise<Uint8Array>, label: string, opts: { abortAll: boolean; source: string; adapter?: boolean }): Promise<WeightUpdateRecord> {
    const run = async () => {
      const t0 = performance.now();
      const safetensors = await bytes();
      // Full weights are the base of any adapter loaded later; merged adapter weights are not.
      if (!opts.adapter) this.baseBytes = safetensors;
      const aborted = opts.abortAll ? this.engine.abortAll() : 0;
      // Labelled before the swap: the first tokens under the new weights may be sampled before the swap resolves.
      const version = this.labelOfNumber.length;
      this.labelOfNumber[version] = label;
      await this.engine.updateWeights(version, safetensors);
      const rec = { version: label, source: opts.source, at: Date.now(), ms: performance.now() - t0, aborted };
      this.record(rec);
      return rec;
    };
    const p = this.loading.then(run, run);
    this.loading = p.catch(() => undefined);
    return p;
  }

  private labelOf(v: number): string {
    return this.labelOfNumber[v] ?? String(v);
  }
}

/** A cache salt string as the engine's 64-bit salt (equal strings, equal salts; any other string, another salt). */
function saltOf(s: string): bigint {
  return createHash("sha256").update(s).digest().readBigUInt64LE(0);
}
