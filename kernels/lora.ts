// LoRA: low-rank adapters trained on a frozen base. Each target projection W [out, in] serves
// W0 + scale * B A, with A [rank, in] and B [out, rank] (PEFT's shapes; scale = alpha / rank, or alpha / sqrt(rank)
// with rsLora). The model always holds the merged weights, so the forward, the backward, the engine and the weight
// broadcast are the full model's own kernels, unchanged; a step then reads the gradient G of the adapted tensors only
// (rs_model_buffer_ranges), projects it onto the adapters (dA = scale * B^T G, dB = scale * G A^T: exactly the
// adapters' gradient, since W is linear in each), clips and runs AdamW on the adapters only, and writes the adapted
// tensors' merged weights back, nothing else of the model. Base weights get no update and no optimizer moments; the
// adapters keep a copy of the adapted tensors' base values only (the other tensors' base is what the model holds).
// LoRA dropout (PEFT's: y = W0 x + scale * B A drop(x), a fresh mask per adapted module, token and input element,
// train micro-batches only) is a correction the kernels add on top of the merged product (rs_model_set_lora): the
// adapters' gradient is then the projection above plus the correction's part, which the kernels accumulate. Each
// micro-batch's masks come from (lora.seed, the step, the micro-batch's index in it), so a replayed step draws them
// again. With group-prefix packing a shared prompt is computed once, so its tokens draw one mask for the group's
// samples (PEFT's unpacked rows draw one each: the same expectation, correlated within the group; sharePrefix: false
// draws per sample). What this does not save yet: the full gradient buffer the backward writes (a native LoRA backward would form
// dA and dB without it), and the base's gradient work.
import { z } from "zod";
import { kernels } from "./layer-kernels.js";
import { globalNormClip, type OptimizerConfig } from "./optimizer.js";
import type { ParamRanges } from "./policy-model.js";

/** The projections a target name may pick (HF module names), and PEFT's shorthand for all of them. */
export const LORA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] as const;

export const LoraSchema = z.strictObject({
  rank: z.number().int().min(1).max(4096),
  alpha: z.number().positive().default(16),
  dropout: z
    .number()
    .min(0)
    .lt(1)
    .default(0)
    .describe(
      "LoRA dropout on the adapters' input, as PEFT's lora_dropout (each module, token and input element; training forward only; masks seeded by lora.seed, the step and the micro-batch, so replay redraws them); > 0 needs the CPU backend",
    ),
  targetModules: z
    .array(z.enum([...LORA_MODULES, "all-linear"]))
    .min(1)
    .default(["all-linear"])
    .describe("the projections that get adapters (HF module names), or all-linear for every one"),
  rsLora: z.boolean().default(false).describe("scale by alpha / sqrt(rank) instead of alpha / rank (PEFT's use_rslora)"),
  sft: z
    .boolean()
    .default(true)
    .describe(
      "the SFT stage trains the adapters too, on the frozen base (false: SFT trains every weight and RL trains fresh adapters on what it left, for a model trained from scratch)",
    ),
  seed: z.number().int().nonnegative().default(0).describe("the adapters' init seed (A uniform like PEFT's kaiming init, B zero) and the dropout masks' seed"),
  ship: z
    .enum(["merged", "adapter"])
    .default("merged")
    .describe(
      "what an inference fleet (backend rollstream, sglang or vllm) gets each RL version as: merged, full weights (update_weights_from_disk / the vLLM reload route); adapter, the frozen base once and then a PEFT adapter folder per version (<exportDir>/<run>-v<n>) loaded with load_lora_adapter and named by each request (vLLM model, SGLang lora_path). The local engine always serves merged weights",
    ),
});
export type LoraSettings = z.infer<typeof LoraSchema>;

/** One adapted projection: where its base weight lies in the model's flat buffer, where A and B lie in the adapters'. */
export interface LoraTarget {
  /** The HF module path, e.g. model.layers.0.self_attn.q_proj. */
  module: string;
  out: number;
  in: number;
  /** Offset of the base weight [out, in] in the model's params. */
  weightOffset: number;
  /** Offsets of A [rank, in] and B [out, rank] in the adapters' buffer. */
  a: number;
  b: number;
}

/** The steps' AdamW result, as PolicyModel.step reports it. */
export interface AdapterStepResult {
  gradNorm: number;
  clipped: boolean;
  step: number;
  skipped: boolean;
}

interface TensorLike {
  name: string;
  shape: number[];
  offset: number;
  size: number;
}

const PROJECTION = /^(model\.layers\.\d+\.(?:self_attn|mlp)\.([a-z_]+))\.weight$/;

/** The model tensors the settings adapt, in model order; an error names a target module the model lacks. */
export function loraTargets(tensors: TensorLike[], s: Pick<LoraSettings, "rank" | "targetModules">): LoraTarget[] {
  const wanted = new Set<string>(s.targetModules.includes("all-linear") ? LORA_MODULES : s.targetModules);
  const targets: LoraTarget[] = [];
  const found = new Set<string>();
  let at = 0;
  for (const t of tensors) {
    const m = PROJECTION.exec(t.name);
    if (!m || !wanted.has(m[2]!) || t.shape.length !== 2) continue;
    found.add(m[2]!);
    const [out, inDim] = t.shape as [number, number];
    targets.push({ module: m[1]!, out, in: inDim, weightOffset: t.offset, a: at, b: at + s.rank * inDim });
    at += s.rank * (inDim + out);
  }
  for (const w of wanted) if (!found.has(w)) throw new Error(`model.lora.targetModules: the model has no ${w} projection`);
  return targets;
}

/** What a LoRA step needs of the model: the adapted tensors' gradient, their merged weights written back. */
export interface LoraModel {
  readRanges(buffer: "grads", ranges: ParamRanges): Float32Array;
  writeParamRanges(ranges: ParamRanges, values: Float32Array): void;
  zeroGrad(): void;
  setLora(spec: { rank: number; scale: number; dropout: number; seed: number; targets: Float64Array; adapters: Float32Array }): void;
  readLoraGrads(n: number): Float32Array;
}

/** The seed of one micro-batch's dropout masks: (lora.seed, step, micro-batch) mixed into 52 bits (a JS-safe integer). */
export function dropoutSeed(seed: number, step: number, micro: number): number {
  let h = 0x811c9dc5 ^ seed;
  let l = 0x9e3779b9;
  for (const v of [seed, step, micro]) {
    // Two 32-bit lanes of FNV-like mixing; the same on every machine.
    h = Math.imul(h ^ (v >>> 0), 0x01000193) >>> 0;
    l = Math.imul(l ^ Math.floor(v / 4294967296) ^ h, 0x85ebca6b) >>> 0;
    h = (h ^ (l >>> 13)) >>> 0;
  }
  return (l & 0xfffff) * 4294967296 + h;
}

export class LoraAdapters {
  readonly scale: number;
  /** A and B of every target, flat; the AdamW moments share the layout. */
  readonly params: Float32Array;
  readonly m: Float32Array;
  readonly v: Float32Array;
  /** The adapted tensors' frozen base values, back to back in target order (the ranges' order). */
  readonly targetBase: Float32Array;
  /** Where the adapted tensors lie in the model's flat buffers. */
  readonly ranges: ParamRanges;
  step = 0;

  constructor(
    readonly settings: LoraSettings,
    readonly targets: LoraTarget[],
    /** The base weights (a model's whole flat buffer): only the adapted tensors' values are kept. */
    base: Float32Array,
    params?: Float32Array,
  ) {
    this.scale = settings.rsLora ? settings.alpha / Math.sqrt(settings.rank) : settings.alpha / settings.rank;
    const n = targets.reduce((s, t) => s + settings.rank * (t.in + t.out), 0);
    if (params && params.length !== n) throw new Error(`LoRA adapters: ${params.length} values given, the targets need ${n}`);
    this.params = params ?? initAdapters(targets, settings);
    this.m = new Float32Array(n);
    this.v = new Float32Array(n);
    const offsets = Float64Array.from(targets, (t) => t.weightOffset);
    const sizes = Float64Array.from(targets, (t) => t.out * t.in);
    this.ranges = { offsets, sizes, total: sizes.reduce((s, x) => s + x, 0) };
    this.targetBase = new Float32Array(this.ranges.total);
    this.eachTarget((t, at) => this.targetBase.set(base.subarray(t.weightOffset, t.weightOffset + t.out * t.in), at));
  }

  /** Calls f with each target and where its values start in the packed (ranges-order) arrays. */
  private eachTarget(f: (t: LoraTarget, at: number) => void): void {
    let at = 0;
    for (const t of this.targets) {
      f(t, at);
      at += t.out * t.in;
    }
  }

  /** The adapted tensors' merged weights, base + scale * B A, back to back in target order. */
  mergedTargets(): Float32Array {
    const w = Float32Array.from(this.targetBase);
    const r = this.settings.rank;
    this.eachTarget((t, at) =>
      kernels.sgemm({
        M: t.out,
        N: t.in,
        K: r,
        alpha: this.scale,
        beta: 1,
        A: this.params.subarray(t.b, t.b + t.out * r),
        B: this.params.subarray(t.a, t.a + r * t.in),
        C: w.subarray(at, at + t.out * t.in),
      }),
    );
    return w;
  }

  /** A copy of a model's flat params (`rest`: the tensors LoRA does not adapt) with the adapted tensors merged. */
  merged(rest: Float32Array): Float32Array {
    return this.scatter(rest, this.mergedTargets());
  }

  /** A copy of a model's flat params with the adapted tensors' base values: the frozen base model. */
  baseOf(rest: Float32Array): Float32Array {
    return this.scatter(rest, this.targetBase);
  }

  private scatter(rest: Float32Array, packed: Float32Array): Float32Array {
    const w = Float32Array.from(rest);
    this.eachTarget((t, at) => w.set(packed.subarray(at, at + t.out * t.in), t.weightOffset));
    return w;
  }

  /** Writes the adapted tensors' merged weights into the model (nothing else of it). */
  load(model: Pick<LoraModel, "writeParamRanges">): void {
    model.writeParamRanges(this.ranges, this.mergedTargets());
  }

  /** The adapters' gradient from the adapted tensors' gradient (back to back in target order, as readRanges gives it). */
  gradients(targetGrads: Float32Array): Float32Array {
    const g = new Float32Array(this.params.length);
    const r = this.settings.rank;
    this.eachTarget((t, at) => {
      const gw = targetGrads.subarray(at, at + t.out * t.in);
      const A = this.params.subarray(t.a, t.a + r * t.in);
      const B = this.params.subarray(t.b, t.b + t.out * r);
      // dA [r, in] = scale * B^T [r, out] G [out, in]; dB [out, r] = scale * G [out, in] A^T [in, r].
      kernels.sgemm({ transA: true, M: r, N: t.in, K: t.out, alpha: this.scale, A: B, B: gw, C: g.subarray(t.a, t.a + r * t.in) });
      kernels.sgemm({ transB: true, M: t.out, N: r, K: t.in, alpha: this.scale, A: gw, B: A, C: g.subarray(t.b, t.b + t.out * r) });
    });
    return g;
  }

  /** With dropout > 0: hands the kernels the adapters and the masks of micro-batch `micro` of `step` (before it runs). */
  beforeMicro(model: Pick<LoraModel, "setLora">, step: number, micro: number): void {
    if (this.settings.dropout === 0) return;
    const targets = Float64Array.from(this.targets.flatMap((t) => [t.weightOffset, t.a, t.b]));
    const seed = dropoutSeed(this.settings.seed, step, micro);
    model.setLora({ rank: this.settings.rank, scale: this.scale, dropout: this.settings.dropout, seed, targets, adapters: this.params });
  }

  /** The adapters' gradient after the micro-batches: the merged weights' part, plus the dropout correction's. */
  gradientsOf(model: Pick<LoraModel, "readRanges" | "readLoraGrads">): Float32Array {
    const g = this.gradients(model.readRanges("grads", this.ranges));
    if (this.settings.dropout === 0) return g;
    const c = model.readLoraGrads(g.length);
    for (let i = 0; i < g.length; i++) g[i]! += c[i]!;
    return g;
  }

  /**
   * The optimizer step of LoRA training: the adapters' gradient from the adapted tensors' gradient, the update, and
   * their merged weights written back; the model's gradient is zeroed as its own step would.
   */
  stepModel(model: LoraModel, opt: Parameters<LoraAdapters["update"]>[1]): AdapterStepResult {
    const grads = this.gradientsOf(model);
    model.zeroGrad();
    const r = this.update(grads, opt);
    if (!r.skipped) this.load(model);
    return r;
  }

  /** Fresh AdamW moments and step count (RL after SFT), the adapters kept. */
  resetOptimizer(): void {
    this.m.fill(0);
    this.v.fill(0);
    this.step = 0;
  }

  /** Global-norm clip and AdamW on the adapters (the model's own step rules); a non-finite norm changes nothing. */
  update(grads: Float32Array, opt: Pick<OptimizerConfig, "beta1" | "beta2" | "eps" | "weightDecay" | "maxGradNorm"> & { lr: number }): AdapterStepResult {
    const gradNorm = kernels.gradNorm(grads);
    if (!Number.isFinite(gradNorm)) return { gradNorm, clipped: false, step: this.step, skipped: true };
    const { clipped, gradScale } = globalNormClip(gradNorm, opt.maxGradNorm);
    this.step++;
    kernels.adamw(this.params, grads, this.m, this.v, { ...opt, step: this.step, gradScale });
    return { gradNorm, clipped, step: this.step, skipped: false };
  }
}

/** PEFT's init: A uniform in +-1/sqrt(in) (kaiming_uniform with a = sqrt(5)), B zero, so the merged model is the base. */
function initAdapters(targets: LoraTarget[], s: LoraSettings): Float32Array {
  const n = targets.reduce((acc, t) => acc + s.rank * (t.in + t.out), 0);
  const p = new Float32Array(n);
  let state = (s.seed ^ 0x9e3779b9) >>> 0;
  const next = () => {
    // mulberry32: a small seeded generator, so an init is the same on every machine.
    state = (state + 0x6d2b79f5) >>> 0;
    let x = state;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
  for (const t of targets) {
    const bound = 1 / Math.sqrt(t.in);
    for (let i = 0; i < s.rank * t.in; i++) p[t.a + i] = (2 * next() - 1) * bound;
  }
  return p;
}
