// The step-level generation engine (rs_engine_* in kernels/kernels.h) from TypeScript: continuous batching over
// paged KV blocks, shared group prefixes (copy-on-write), a prefix cache namespaced by weights version, preemption
// by recompute. A scheduler adds requests and cancels them between steps and calls step() in a loop; each step
// returns the tokens sampled in it (with the weights version each was sampled under) and the sequences that
// finished. Created by PolicyModel.createEngine: steps queue behind the model's other calls, never beside them.
import { STOP_REASON_NAMES, type StopReason, toEos, toSeed, toStops } from "./generate-request.js";
import type { ModelConfig } from "./model-config.js";
import type { NativeEngine, NativeEngineConfig, NativeEngineStats } from "./native.js";
import { checkTokenIds, expectArray, expectInt } from "./validate.js";

export interface EngineOptions {
  /** KV blocks in the pool: the engine never holds more than nBlocks * blockSize tokens of KV. */
  nBlocks: number;
  /** Tokens per block; default 16. */
  blockSize?: number;
  /** Sequences running at once (each completion of a group counts); default 256. */
  maxSeqs?: number;
  /** Prompt rows computed per step, over all sequences; default 4096. */
  maxPrefillTokens?: number;
  /** Let sequences read cached KV computed under other weights versions (off-policy KV); default false. */
  cacheAcrossVersions?: boolean;
}

export interface EngineRequest {
  prompt: Int32Array;
  /** One seed per completion: completion i draws its k-th token from the stream (seeds[i], k). The completions of
   *  one request are prefilled once and share the prompt's KV blocks. */
  seeds: Array<number | bigint>;
  maxNewTokens: number;
  /** Default 1; 0 = greedy. */
  temperature?: number;
  topP?: number;
  topK?: number;
  eosTokenId?: number | number[];
  stopSequences?: Int32Array[];
  vocabLimit?: number;
  /** Blocks are shared only between requests with the same salt; default 0 (the common cache). */
  cacheSalt?: number | bigint;
}

export interface EngineToken {
  seqId: number;
  /** k: the k-th generated token of its sequence. */
  index: number;
  token: number;
  logprob: number;
  policyLogprob: number;
  /** The weights version it was sampled under (setVersion). */
  version: number;
}

export interface EngineFinish {
  seqId: number;
  stopReason: StopReason;
  /** Tokens the sequence generated in all. */
  tokens: number;
}

export interface EngineStep {
  tokens: EngineToken[];
  finished: EngineFinish[];
  prefillRows: number;
  decodeRows: number;
  /** [tokens.length, vocab]: the logits each token was drawn from, only when asked for. */
  logits?: Float32Array;
}

export type EngineStats = NativeEngineStats;

/** A span of completion tokens [start, end) sampled under one weights version (the shape SGLang returns). */
export interface VersionSpan {
  version: number;
  start: number;
  end: number;
}

/** Consecutive runs of equal versions over a completion's tokens. */
export function versionSpans(versions: ArrayLike<number>): VersionSpan[] {
  const spans: VersionSpan[] = [];
  for (let i = 0; i < versions.length; i++) {
    const last = spans[spans.length - 1];
    if (last && last.version === versions[i]) last.end = i + 1;
    else spans.push({ version: versions[i], start: i, end: i + 1 });
  }
  return spans;
}

export function toNativeEngineConfig(o: EngineOptions): NativeEngineConfig {
  if (typeof o !== "object" || o === null) throw new TypeError("createEngine: options must be an object");
  const cacheAcrossVersions = o.cacheAcrossVersions ?? false;
  if (typeof cacheAcrossVersions !== "boolean") throw new TypeError("createEngine: cacheAcrossVersions must be a boolean");
  return {
    nBlocks: expectInt("createEngine: nBlocks", o.nBlocks, 1, 1 << 24),
    blockSize: expectInt("createEngine: blockSize", o.blockSize ?? 16, 1, 1024),
    maxSeqs: expectInt("createEngine: maxSeqs", o.maxSeqs ?? 256, 1, 1 << 20),
    maxPrefillTokens: expectInt("createEngine: maxPrefillTokens", o.maxPrefillTokens ?? 4096, 1, 1 << 24),
    cacheAcrossVersions,
  };
}

type Queue = <R>(what: string, work: () => Promise<R>) => Promise<R>;

export class InferenceEngine {
  private stepping = false;
  private disposed = false;

  /** Use PolicyModel.createEngine. */
  constructor(
    private readonly native: NativeEngine,
    private readonly config: ModelConfig,
    private readonly queue: Queue,
  ) {}

  /** Queues the request's completions; returns their sequence ids (one per seed, in order). */
  add(req: EngineRequest): number[] {
    const native = this.idle("add");
    const fn = "engine.add";
    if (typeof req !== "object" || req === null) throw new TypeError(`${fn}: request must be an object`);
    const prompt = expectArray(`${fn}: prompt`, req.prompt, Int32Array);
    if (prompt.length === 0) throw new RangeError(`${fn}: prompt is empty`);
    checkTokenIds(`${fn}: prompt`, prompt, this.config.vocabSize);
    if (!Array.isArray(req.seeds) || req.seeds.length === 0) throw new RangeError(`${fn}: seeds must be a non-empty array (one per completion)`);
    const seeds = BigUint64Array.from(req.seeds.map((s, i) => toSeed(`${fn}: seeds[${i}]`, s)));
    const temperature = req.temperature ?? 1;
    const topP = req.topP ?? 1;
    if (typeof temperature !== "number" || !(temperature >= 0) || !Number.isFinite(temperature)) {
      throw new RangeError(`${fn}: temperature must be a finite number >= 0 (got ${temperature})`);
    }
    if (typeof topP !== "number" || !(topP > 0 && topP <= 1)) throw new RangeError(`${fn}: topP must be in (0, 1] (got ${topP})`);
    const { stopFlat, stopOffsets } = toStops(fn, req.stopSequences, this.config.vocabSize);
    const ids = native.add(prompt, seeds, {
      maxNewTokens: expectInt(`${fn}: maxNewTokens`, req.maxNewTokens, 0, 1 << 24),
      temperature,
      topP,
      topK: expectInt(`${fn}: topK`, req.topK ?? 0, 0, 2 ** 31 - 1),
      vocabLimit: req.vocabLimit === undefined ? 0 : expectInt(`${fn}: vocabLimit`, req.vocabLimit, 1, this.config.vocabSize),
      eos: toEos(fn, req.eosTokenId, this.config.vocabSize),
      stopFlat,
      stopOffsets,
      cacheSalt: toSeed(`${fn}: cacheSalt`, req.cacheSalt ?? 0),
    });
    return Array.from(ids);
  }

  /** One step: a forward over every running sequence's next rows, then sampling. */
  step(opts: { returnLogits?: boolean } = {}): Promise<EngineStep> {
    let native: NativeEngine;
    try {
      native = this.idle("step");
    } catch (e) {
      return Promise.reject(e);
    }
    this.stepping = true;
    const run = async (): Promise<EngineStep> => {
      try {
        const s = await native.step(opts.returnLogits ?? false);
        const tokens: EngineToken[] = Array.from(s.tokens, (token, i) => ({
          seqId: s.seqIds[i],
          index: s.index[i],
          token,
          logprob: s.logprobs[i],
          policyLogprob: s.policyLogprobs[i],
          version: s.versions[i],
        }));
        const finished: EngineFinish[] = Array.from(s.finishedIds, (seqId, j) => ({
          seqId,
          stopReason: STOP_REASON_NAMES[s.stopReasons[j]],
          tokens: s.finishedTokens[j],
        }));
        const out: EngineStep = { tokens, finished, prefillRows: s.prefillRows, decodeRows: s.decodeRows };
        if (s.logits) out.logits = s.logits;
        return out;
      } finally {
        this.stepping = false;
      }
    };
    return this.queue("engine.step", run);
  }

  /** Ends a sequence now (no finish record); its full blocks stay cached. */
  cancel(seqId: number): void {
    this.idle("cancel").cancel(expectInt("engine.cancel: seqId", seqId, 1));
  }

  /**
   * The model's weights changed (write them first, between steps): later tokens carry `version`. "keep": running
   * sequences go on with the KV they have; "recompute": they are prefilled again under the new weights.
   */
  setVersion(version: number, mode: "keep" | "recompute" = "keep"): void {
    if (mode !== "keep" && mode !== "recompute") throw new RangeError(`engine.setVersion: mode must be "keep" or "recompute" (got ${mode})`);
    this.idle("setVersion").setVersion(expectInt("engine.setVersion: version", version, -(2 ** 52), 2 ** 52), mode === "keep" ? 0 : 1);
  }

  stats(): EngineStats {
    if (this.disposed) throw new Error("engine.stats: the engine has been disposed");
    return this.native.stats();
  }

  dispose(): void {
    if (this.disposed) return;
    if (this.stepping) throw new Error("engine.dispose: a step is still running; await it first");
    this.disposed = true;
    this.native.dispose();
  }

  private idle(what: string): NativeEngine {
    if (this.disposed) throw new Error(`engine.${what}: the engine has been disposed`);
    if (this.stepping) throw new Error(`engine.${what}: a step is still running; await it first`);
    return this.native;
  }
}
