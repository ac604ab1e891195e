// PolicyModel: the Llama-style policy the learner trains and the inference actor samples from, backed by the
// native kernels. Long calls run off the JS thread and are serialised per model (a call waits for the previous
// one), so callers may fire them without coordinating; synchronous buffer access while one runs throws.
import { validateModelConfig } from "./hf-config.js";
import { type ModelConfig, moeLayerFlags } from "./model-config.js";
import { isPolicyLoss, toNativeLossSpec, type LossSpec } from "./loss-spec.js";
import { OptimizerSchema } from "./optimizer.js";
import { BufferKind, resolveBackend, type Device, type DeviceRequest, type NativeLossStats, type NativeModel, type NativeStepOptions } from "./native.js";
import { readSafetensors, writeSafetensors, type LoadedTensor } from "./safetensors.js";
import { type EngineOptions, InferenceEngine, toNativeEngineConfig } from "./engine.js";
import { fromNativeGenerate, toNativeGenerate, type GenerateRequest, type GenerateResult } from "./generate-request.js";
import { checkSegmentParents, checkSegments, checkTokenIds, expectArray, expectFinite, expectInt } from "./validate.js";

/**
 * One packed row of T tokens holding several sequences. Per-token arrays are indexed by the token being
 * PREDICTED: lossMask[t] = 1 trains tokens[t] from the prefix before it in its segment (0 at root segment starts).
 */
export interface PackedMicroBatch extends PackedRow {
  lossMask: Uint8Array;
  /** Required by rl / ppo_clip. */
  advantages?: Float32Array;
  /** Logprob of tokens[t] under the sampler; required by rl / ppo_clip. */
  samplerLogprobs?: Float32Array;
}

/** Tokens and how they are laid out in segments. */
export interface PackedRow {
  tokens: Int32Array;
  /** Offset of each packed sequence; first 0, strictly increasing. Positions restart at 0 in each root. */
  segmentStarts: Int32Array;
  /**
   * Group-prefix packing (kernels.h, seg_parent): per segment -1 (a root) or the index of an earlier root it
   * continues: it attends to all of that segment's tokens, its positions continue from its length, and its first
   * token is predicted by the parent's last one. Absent = every segment a root.
   */
  segmentParents?: Int32Array;
}

/** What one micro-batch reports (see NativeLossStats). */
export type MicroStats = NativeLossStats;

/** AdamW settings; those left out take OptimizerSchema's defaults (kernels/optimizer.ts, the only copy). */
export interface StepOptions {
  lr: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  /** Decoupled weight decay on matrices (embeddings and projections), never on norms or biases. */
  weightDecay?: number;
  /** Global-norm clip. <= 0 or Infinity: no clipping. */
  maxGradNorm?: number;
}

// Read once from the schema (lr is always the caller's).
const STEP_DEFAULTS = OptimizerSchema.parse({});

/** AdamW settings checked and completed with the schema's defaults, as the kernels take them (clip 0 = none). */
function nativeStepOptions(what: string, opt: StepOptions): NativeStepOptions {
  if (typeof opt !== "object" || opt === null) throw new TypeError(`${what}: options must be an object with at least lr`);
  const lr = expectFinite(`${what}: lr`, opt.lr);
  const beta1 = expectFinite(`${what}: beta1`, opt.beta1 ?? STEP_DEFAULTS.beta1);
  const beta2 = expectFinite(`${what}: beta2`, opt.beta2 ?? STEP_DEFAULTS.beta2);
  const eps = expectFinite(`${what}: eps`, opt.eps ?? STEP_DEFAULTS.eps);
  const weightDecay = expectFinite(`${what}: weightDecay`, opt.weightDecay ?? STEP_DEFAULTS.weightDecay);
  const maxGradNorm = opt.maxGradNorm ?? STEP_DEFAULTS.maxGradNorm;
  if (typeof maxGradNorm !== "number" || Number.isNaN(maxGradNorm)) throw new TypeError(`${what}: maxGradNorm must be a number (got ${maxGradNorm})`);
  if (lr < 0) throw new RangeError(`${what}: lr must be >= 0 (got ${lr})`);
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1)) throw new RangeError(`${what}: beta1 and beta2 must be in [0, 1) (got ${beta1}, ${beta2})`);
  if (!(eps > 0)) throw new RangeError(`${what}: eps must be > 0 (got ${eps})`);
  if (weightDecay < 0) throw new RangeError(`${what}: weightDecay must be >= 0 (got ${weightDecay})`);
  const clip = Number.isFinite(maxGradNorm) && maxGradNorm > 0 ? maxGradNorm : 0;
  return { lr, beta1, beta2, eps, weightDecay, maxGradNorm: clip };
}

export interface StepResult {
  /** Global gradient norm before clipping. */
  gradNorm: number;
  clipped: boolean;
  /** Optimizer steps taken so far. */
  step: number;
  /** True when the gradient norm was not finite: params were left untouched, grads zeroed, step not counted. */
  skipped: boolean;
}

export interface TensorEntry {
  name: string;
  shape: number[];
  /** In floats, into the flat buffers (params, grads, AdamW moments share the layout). */
  offset: number;
  size: number;
  /** AdamW decays it (matrices; not norms and biases). */
  weightDecay: boolean;
}

export interface OptimizerState {
  m: Float32Array;
  v: Float32Array;
  step: number;
}

export interface CreateOptions {
  /** Init seed (deterministic normal(0, 0.02) init). Default 0. */
  seed?: number | bigint;
  /** Threads for every call on this model; default all cores. Results do not depend on it. */
  threads?: number;
  device?: DeviceRequest;
  /** Receives one line saying which backend was chosen and why. */
  log?: (message: string) => void;
}

// Tensors HF checkpoints may carry that this model rightly has no use for.
const IGNORABLE = /(^|\.)rotary_emb\.inv_freq$/;

/** Ranges of a flat buffer: range i is [offsets[i], offsets[i] + sizes[i]); total = the sum of the sizes. */
export interface ParamRanges {
  offsets: Float64Array;
  sizes: Float64Array;
  total: number;
}

export class PolicyModel {
  readonly config: ModelConfig;
  readonly numParams: number;
  readonly device: Device;
  private readonly native: NativeModel;
  private readonly entries: TensorEntry[];
  private queue: Promise<unknown> = Promise.resolve();
  private pending = 0;
  private disposed = false;

  private constructor(config: ModelConfig, native: NativeModel, device: Device) {
    this.config = config;
    this.native = native;
    this.device = device;
    this.numParams = native.numParams();
    this.entries = native.tensors().map(({ name, shape, offset, size, weightDecay }) => ({ name, shape, offset, size, weightDecay }));
  }

  static create(config: ModelConfig, opts: CreateOptions = {}): PolicyModel {
    const cfg = validateModelConfig(config);
    const threads = opts.threads ?? 0;
    expectInt("PolicyModel.create: threads", threads, 0, 4096);
    const seed = opts.seed ?? 0;
    if (typeof seed === "bigint" ? seed < 0n || seed >= 1n << 64n : !Number.isInteger(seed) || seed < 0) {
      throw new RangeError(`PolicyModel.create: seed must be a non-negative integer (got ${seed})`);
    }
    const { backend, device, reason } = resolveBackend(opts.device ?? "auto");
    opts.log?.(`kernels: ${device} backend (${reason}); ${backend.info()}`);
    const native = backend.createModel({ ...cfg, threads, moeLayers: moeLayerFlags(cfg) }, BigInt(seed));
    return new PolicyModel(cfg, native, device);
  }

  /** Threads this model runs on. */
  get threads(): number {
    return this.idle("threads").threads();
  }

  /** Threads for later calls; 0 = all cores. Our own kernels give the same bits on any thread count. */
  setThreads(threads: number): void {
    this.idle("setThreads").setThreads(expectInt("setThreads: threads", threads, 0, 4096));
  }

  /** HF-named tensors in the flat layout order (see kernels/kernels.h). */
  tensors(): TensorEntry[] {
    return this.entries.map((e) => ({ ...e, shape: [...e.shape] }));
  }

  getParams(): Float32Array {
    return this.read(BufferKind.Params, "getParams");
  }

  setParams(p: Float32Array): void {
    expectArray("setParams: params", p, Float32Array, this.numParams);
    this.idle("setParams").write(BufferKind.Params, p);
  }

  getGrads(): Float32Array {
    return this.read(BufferKind.Grads, "getGrads");
  }

  /** Overwrites the accumulated gradient (a gradient summed elsewhere, e.g. over learner ranks). */
  setGrads(g: Float32Array): void {
    expectArray("setGrads: grads", g, Float32Array, this.numParams);
    this.idle("setGrads").write(BufferKind.Grads, g);
  }

  /** The ranges [offsets[i], +sizes[i]) of the params or grads, back to back: only these values move (LoRA's targets). */
  readRanges(buffer: "params" | "grads", ranges: ParamRanges): Float32Array {
    const out = new Float32Array(ranges.total);
    this.idle("readRanges").ranges(buffer === "params" ? BufferKind.Params : BufferKind.Grads, false, ranges.offsets, ranges.sizes, out);
    return out;
  }

  /** Writes values (the ranges back to back) into those ranges of the params; the rest of the model is untouched. */
  writeParamRanges(ranges: ParamRanges, values: Float32Array): void {
    expectArray("writeParamRanges: values", values, Float32Array, ranges.total);
    this.idle("writeParamRanges").ranges(BufferKind.Params, true, ranges.offsets, ranges.sizes, values);
  }

  zeroGrad(): void {
    this.idle("zeroGrad").zeroGrad();
  }

  /** LoRA dropout for the following micro-batches (kernels/lora.ts): the adapters, their targets and the masks' seed. */
  setLora(spec: { rank: number; scale: number; dropout: number; seed: number; targets: Float64Array; adapters: Float32Array }): void {
    this.idle("setLora").setLora(spec.rank, spec.scale, spec.dropout, spec.seed, spec.targets, spec.adapters);
  }

  /** The LoRA dropout correction's part of the adapters' gradient (n: the adapters' length), accumulated since zeroGrad. */
  readLoraGrads(n: number): Float32Array {
    const out = new Float32Array(n);
    this.idle("readLoraGrads").loraGrads(out);
    return out;
  }

  exportOptimizerState(): OptimizerState {
    const native = this.idle("exportOptimizerState");
    if (native.optimizerShard().count !== this.numParams)
      throw new Error("exportOptimizerState: the model keeps one ZeRO-1 slice of the moments; gather the ranks' slices (Zero1Optimizer.fullState)");
    return { m: this.read(BufferKind.AdamM, "exportOptimizerState"), v: this.read(BufferKind.AdamV, "exportOptimizerState"), step: native.stepCount() };
  }

  /** Optimizer steps taken so far. */
  exportStepCount(): number {
    return this.idle("exportStepCount").stepCount();
  }

  /** The moments of the flat slice [offset, offset + count), which must lie in the slice the model keeps. */
  readMoments(offset: number, count: number): { m: Float32Array; v: Float32Array } {
    const native = this.idle("readMoments");
    const [o, n] = [new Float64Array([offset]), new Float64Array([count])];
    const m = new Float32Array(count);
    const v = new Float32Array(count);
    native.ranges(BufferKind.AdamM, false, o, n, m);
    native.ranges(BufferKind.AdamV, false, o, n, v);
    return { m, v };
  }

  /** Writes the moments of the flat slice [offset, offset + m.length) and the step count. */
  writeMoments(offset: number, m: Float32Array, v: Float32Array, step: number): void {
    expectArray("writeMoments: v", v, Float32Array, m.length);
    expectInt("writeMoments: step", step, 0);
    const native = this.idle("writeMoments");
    const [o, n] = [new Float64Array([offset]), new Float64Array([m.length])];
    native.ranges(BufferKind.AdamM, true, o, n, m);
    native.ranges(BufferKind.AdamV, true, o, n, v);
    native.setStepCount(step);
  }

  /** Zero moments on the slice the model keeps, and step count 0 (RL's fresh start, a learner group's first state). */
  resetOptimizer(): void {
    const { offset, count } = this.optimizerShard;
    this.writeMoments(offset, new Float32Array(count), new Float32Array(count), 0);
  }

  importOptimizerState(s: OptimizerState): void {
    if (typeof s !== "object" || s === null) throw new TypeError("importOptimizerState: state must be an object {m, v, step}");
    expectArray("importOptimizerState: m", s.m, Float32Array, this.numParams);
    expectArray("importOptimizerState: v", s.v, Float32Array, this.numParams);
    expectInt("importOptimizerState: step", s.step, 0);
    const native = this.idle("importOptimizerState");
    // A ZeRO-1 rank takes its slice of the whole state (written by any number of ranks).
    const { offset, count } = native.optimizerShard();
    this.writeMoments(offset, s.m.subarray(offset, offset + count), s.v.subarray(offset, offset + count), s.step);
  }

  /** Logits [T * vocab]: row t is the next-token distribution after tokens[t] within its segment. */
  forward(batch: PackedRow): Promise<Float32Array> {
    return this.run("forward", () => {
      this.checkRow("forward", batch);
      return () => this.native.forward(batch.tokens, batch.segmentStarts, batch.segmentParents ?? null);
    });
  }

  /** Forward + backward of one packed micro-batch, adding its gradient (loss / normalizer) to the grads. */
  accumulate(batch: PackedMicroBatch, loss: LossSpec, normalizer: number, opts: { tokenLogprobs?: boolean } = {}): Promise<MicroStats> {
    return this.run("accumulate", () => {
      const spec = toNativeLossSpec(loss, normalizer);
      const T = this.checkRow("accumulate", batch);
      const mask = expectArray("accumulate: lossMask", batch.lossMask, Uint8Array, T);
      for (let t = 0; t < T; t++) if (mask[t] > 1) throw new RangeError(`accumulate: lossMask[${t}] = ${mask[t]}; must be 0 or 1`);
      for (const [i, s] of batch.segmentStarts.entries()) {
        if (mask[s] && (batch.segmentParents?.[i] ?? -1) < 0)
          throw new RangeError(`accumulate: lossMask[${s}] is set at a segment start; nothing predicts the first token of a sequence`);
      }
      let adv: Float32Array | null = null;
      let slp: Float32Array | null = null;
      if (isPolicyLoss(loss)) {
        if (batch.advantages === undefined || batch.samplerLogprobs === undefined) {
          throw new TypeError(`accumulate: the "${loss.name}" loss needs advantages and samplerLogprobs`);
        }
        adv = expectArray("accumulate: advantages", batch.advantages, Float32Array, T);
        slp = expectArray("accumulate: samplerLogprobs", batch.samplerLogprobs, Float32Array, T);
        for (let t = 0; t < T; t++) {
          if (mask[t] && !(Number.isFinite(adv[t]) && Number.isFinite(slp[t]))) {
            throw new RangeError(`accumulate: advantages[${t}] / samplerLogprobs[${t}] must be finite on loss tokens (got ${adv[t]}, ${slp[t]})`);
          }
        }
      }
      const want = opts.tokenLogprobs ?? false;
      return async () => {
        const s = await this.native.trainMicro(batch.tokens, batch.segmentStarts, batch.segmentParents ?? null, mask, adv, slp, spec, want);
        const stats: MicroStats = {
          loss: s.loss,
          lossTokens: s.lossTokens,
          maskedTokens: s.maskedTokens,
          entropySum: s.entropySum,
          mismatchKlSum: s.mismatchKlSum,
          logpSum: s.logpSum,
          ratioSum: s.ratioSum,
        };
        if (s.tokenLogprobs) stats.tokenLogprobs = s.tokenLogprobs;
        return stats;
      };
    });
  }

  /** Global grad-norm clip, AdamW with bias correction, then zero grads. */
  step(opt: StepOptions): Promise<StepResult> {
    return this.run("step", () => {
      const o = nativeStepOptions("step", opt);
      return async () => {
        const r = await this.native.step(o);
        return { gradNorm: r.gradNorm, clipped: r.clipped, step: r.step, skipped: r.skipped };
      };
    });
  }

  /**
   * ZeRO-1 (kernels/zero1.ts): from now on the model keeps the AdamW moments of the flat slice [offset, offset + count)
   * only (its current values there), so each of N ranks holds 1/N of the optimizer state. offset 0, count numParams
   * gives the whole state back.
   */
  shardOptimizer(offset: number, count: number): void {
    expectInt("shardOptimizer: offset", offset, 0, this.numParams);
    expectInt("shardOptimizer: count", count, 0, this.numParams - offset);
    this.idle("shardOptimizer").shardOptimizer(offset, count);
  }

  /** The flat slice whose moments the model keeps: all of it unless shardOptimizer narrowed it. */
  get optimizerShard(): { offset: number; count: number } {
    return this.idle("optimizerShard").optimizerShard();
  }

  /** A ZeRO-1 rank's step: AdamW on its slice from the reduce-scattered gradient there, clipped by the global norm. */
  shardStep(opt: StepOptions, gradNorm: number): Promise<StepResult> {
    return this.run("shardStep", () => {
      const o = nativeStepOptions("shardStep", opt);
      if (typeof gradNorm !== "number") throw new TypeError(`shardStep: gradNorm must be a number (got ${gradNorm})`);
      return async () => {
        const r = await this.native.shardStep(o, gradNorm);
        return { gradNorm: r.gradNorm, clipped: r.clipped, step: r.step, skipped: r.skipped };
      };
    });
  }

  /** The MPI reduce-scatter of the gradient in the model's own buffer; this rank's slice's sum of squares. */
  reduceScatterGrads(counts: number[]): number {
    return this.idle("reduceScatterGrads").reduceScatterGrads(counts);
  }

  /** The MPI all-gather of the parameters in the model's own buffer. */
  allGatherParams(counts: number[]): void {
    this.idle("allGatherParams").allGatherParams(counts);
  }

  /** The reduce-scatter over an NCCL communicator (backend.ncclInit) on the model's device buffers. */
  ncclReduceScatterGrads(handle: number, counts: number[], rank: number): number {
    return this.idle("ncclReduceScatterGrads").ncclReduceScatterGrads(handle, Float64Array.from(counts), rank);
  }

  /** The all-gather over an NCCL communicator on the model's device buffers. */
  ncclAllGatherParams(handle: number, counts: number[]): void {
    this.idle("ncclAllGatherParams").ncclAllGatherParams(handle, Float64Array.from(counts));
  }

  /** KV-cache sampling over a ragged batch of prompts (see GenerateRequest / GenerateResult). */
  generate(req: GenerateRequest): Promise<GenerateResult[]> {
    return this.run("generate", () => {
      const args = toNativeGenerate(req, this.config.vocabSize, this.config.maxPositionEmbeddings);
      return async () => {
        const out = await this.native.generate(args.flat, args.offsets, args.seeds, args.config);
        return fromNativeGenerate(out, req.prompts.length, args.config.maxNewTokens, this.config.vocabSize);
      };
    });
  }

  /** A continuous-batching engine over this model (kernels/engine.ts); its steps queue behind this model's calls. */
  createEngine(opts: EngineOptions): InferenceEngine {
    const native = this.idle("createEngine").createEngine(toNativeEngineConfig(opts));
    return new InferenceEngine(native, this.config, (what, work) => this.run(what, () => work));
  }

  /** The params as safetensors bytes, by HF name (F32, or BF16 for a smaller inference copy). */
  toSafetensors(opts: { dtype?: "F32" | "BF16"; metadata?: Record<string, string> } = {}): Uint8Array {
    const params = this.getParams();
    const tensors = this.entries.map((e) => ({
      name: e.name,
      shape: e.shape,
      data: params.subarray(e.offset, e.offset + e.size),
      dtype: opts.dtype ?? ("F32" as const),
    }));
    return writeSafetensors(tensors, opts.metadata);
  }

  /**
   * Loads params from safetensors bytes by HF name. Every tensor of this model must be present with its exact
   * shape; an unexpected tensor is an error too (it means a different architecture), except RoPE caches and a
   * redundant lm_head.weight in a tied checkpoint.
   */
  loadSafetensors(bytes: Uint8Array): void {
    this.loadTensors(readSafetensors(bytes));
  }

  /** Every tensor of the model from `file` (an HF folder's weights: kernels/hf-weights.ts), by HF name and shape. */
  loadTensors(file: ReadonlyMap<string, LoadedTensor>): void {
    const params = new Float32Array(this.numParams);
    const known = new Set(this.entries.map((e) => e.name));
    for (const e of this.entries) {
      const t = file.get(e.name);
      if (!t) throw new Error(`loadSafetensors: tensor "${e.name}" is missing`);
      if (t.shape.length !== e.shape.length || t.shape.some((d, i) => d !== e.shape[i])) {
        throw new Error(`loadSafetensors: tensor "${e.name}" has shape [${t.shape.join(", ")}], the model needs [${e.shape.join(", ")}]`);
      }
      params.set(t.data, e.offset);
    }
    for (const name of file.keys()) {
      if (known.has(name) || IGNORABLE.test(name) || (name === "lm_head.weight" && this.config.tieWordEmbeddings) || this.ignoredLayer(name)) continue;
      throw new Error(`loadSafetensors: unexpected tensor "${name}" (not part of this model's config)`);
    }
    this.setParams(params);
  }

  /** A tensor of a layer past numLayers that the config says the checkpoint carries unused (GLM's MTP layers). */
  private ignoredLayer(name: string): boolean {
    const l = /^model\.layers\.(\d+)\./.exec(name);
    const extra = this.config.ignoredCheckpointLayers ?? 0;
    return l !== null && Number(l[1]) >= this.config.numLayers && Number(l[1]) < this.config.numLayers + extra;
  }

  /** Frees the native model (after any call in flight has finished). */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    void this.queue.then(
      () => this.native.dispose(),
      () => this.native.dispose(),
    );
  }

  // ------------------------------------------------------------------------------------------ internals

  private idle(what: string): NativeModel {
    if (this.disposed) throw new Error(`PolicyModel.${what}: the model has been disposed`);
    if (this.pending > 0) throw new Error(`PolicyModel.${what}: a forward/accumulate/step/generate call is still running; await it first`);
    return this.native;
  }

  private read(kind: BufferKind, what: string): Float32Array {
    const out = new Float32Array(this.numParams);
    this.idle(what).read(kind, out);
    return out;
  }

  /** Validates now (so bad input rejects at once), then runs after the calls queued before it. */
  private run<R>(what: string, prepare: () => () => Promise<R>): Promise<R> {
    if (this.disposed) return Promise.reject(new Error(`PolicyModel.${what}: the model has been disposed`));
    let work: () => Promise<R>;
    try {
      work = prepare();
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
    this.pending++;
    const p = this.queue.then(work, work);
    this.queue = p.then(
      () => this.pending--,
      () => this.pending--,
    );
    return p;
  }

  /** Checks tokens / segmentStarts / segmentParents of a packed row; returns T. */
  private checkRow(what: string, batch: PackedRow): number {
    if (typeof batch !== "object" || batch === null) throw new TypeError(`${what}: batch must be an object`);
    const tokens = expectArray(`${what}: tokens`, batch.tokens, Int32Array);
    if (tokens.length === 0) throw new RangeError(`${what}: tokens is empty`);
    if (tokens.length > 2 ** 31 - 1) throw new RangeError(`${what}: too many tokens`);
    checkTokenIds(`${what}: tokens`, tokens, this.config.vocabSize);
    const segs = expectArray(`${what}: segmentStarts`, batch.segmentStarts, Int32Array);
    try {
      checkSegments(segs, tokens.length, this.config.maxPositionEmbeddings);
      if (batch.segmentParents !== undefined) {
        const parents = expectArray(`${what}: segmentParents`, batch.segmentParents, Int32Array);
        checkSegmentParents(parents, segs, tokens.length, this.config.maxPositionEmbeddings);
      }
    } catch (e) {
      throw new RangeError(`${what}: ${(e as Error).message}`);
    }
    return tokens.length;
  }
}
