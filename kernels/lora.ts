// LoRA: low-rank adapters trained on a frozen base. Each target projection W [out, in] serves
// W0 + scale * B A, with A [rank, in] and B [out, rank] (PEFT's shapes; scale = alpha / rank, or alpha / sqrt(rank)
// with rsLora). The model always holds the merged weights, so the forward, the backward, the engine and the weight
// broadcast are the full model's own kernels, unchanged; a step then projects the merged weights' gradient G onto
// the adapters (dA = scale * B^T G, dB = scale * G A^T: exactly the adapters' gradient, since W is linear in each),
// clips and runs AdamW on the adapters only, and merges again from the base. Base weights get no update and no
// optimizer moments. What this does not save yet: the full gradient buffer the backward writes (a native LoRA
// backward would form dA and dB without it).
import { z } from "zod";
import { kernels } from "./layer-kernels.js";
import type { OptimizerConfig } from "./optimizer.js";

/** The projections a target name may pick (HF module names), and PEFT's shorthand for all of them. */
export const LORA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] as const;

export const LoraSchema = z.strictObject({
  rank: z.number().int().min(1).max(4096),
  alpha: z.number().positive().default(16),
  dropout: z
    .literal(0)
    .default(0)
    .describe("LoRA dropout on the adapters' input: only 0 (adapters are merged into the weights, so the input is not theirs alone)"),
  targetModules: z
    .array(z.enum([...LORA_MODULES, "all-linear"]))
    .min(1)
    .default(["all-linear"])
    .describe("the projections that get adapters (HF module names), or all-linear for every one"),
  rsLora: z.boolean().default(false).describe("scale by alpha / sqrt(rank) instead of alpha / rank (PEFT's use_rslora)"),
  seed: z.number().int().nonnegative().default(0).describe("the adapters' init seed (A uniform like PEFT's kaiming init, B zero)"),
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

export class LoraAdapters {
  readonly scale: number;
  /** A and B of every target, flat; the AdamW moments share the layout. */
  readonly params: Float32Array;
  readonly m: Float32Array;
  readonly v: Float32Array;
  step = 0;

  constructor(
    readonly settings: LoraSettings,
    readonly targets: LoraTarget[],
    /** The frozen base weights (the model's whole flat buffer). */
    readonly base: Float32Array,
    params?: Float32Array,
  ) {
    this.scale = settings.rsLora ? settings.alpha / Math.sqrt(settings.rank) : settings.alpha / settings.rank;
    const n = targets.reduce((s, t) => s + settings.rank * (t.in + t.out), 0);
    if (params && params.length !== n) throw new Error(`LoRA adapters: ${params.length} values given, the targets need ${n}`);
    this.params = params ?? initAdapters(targets, settings);
    this.m = new Float32Array(n);
    this.v = new Float32Array(n);
  }

  /** The base with every target's scale * B A added: what the model serves and trains through. */
  merged(): Float32Array {
    const w = Float32Array.from(this.base);
    const r = this.settings.rank;
    for (const t of this.targets) {
      kernels.sgemm({
        M: t.out,
        N: t.in,
        K: r,
        alpha: this.scale,
        beta: 1,
        A: this.params.subarray(t.b, t.b + t.out * r),
        B: this.params.subarray(t.a, t.a + r * t.in),
        C: w.subarray(t.weightOffset, t.weightOffset + t.out * t.in),
      });
    }
    return w;
  }

  /** The adapters' gradient from the merged weights' gradient (the model's flat grads). */
  gradients(full: Float32Array): Float32Array {
    const g = new Float32Array(this.params.length);
    const r = this.settings.rank;
    for (const t of this.targets) {
      const gw = full.subarray(t.weightOffset, t.weightOffset + t.out * t.in);
      const A = this.params.subarray(t.a, t.a + r * t.in);
      const B = this.params.subarray(t.b, t.b + t.out * r);
      // dA [r, in] = scale * B^T [r, out] G [out, in]; dB [out, r] = scale * G [out, in] A^T [in, r].
      kernels.sgemm({ transA: true, M: r, N: t.in, K: t.out, alpha: this.scale, A: B, B: gw, C: g.subarray(t.a, t.a + r * t.in) });
      kernels.sgemm({ transB: true, M: t.out, N: r, K: t.in, alpha: this.scale, A: gw, B: A, C: g.subarray(t.b, t.b + t.out * r) });
    }
    return g;
  }

  /**
   * The optimizer step of LoRA training: the adapters' gradient from the model's, the update, and the model's
   * weights merged again; the model's gradient is zeroed as its own step would.
   */
  stepModel(
    model: { getGrads(): Float32Array; zeroGrad(): void; setParams(p: Float32Array): void },
    opt: Parameters<LoraAdapters["update"]>[1],
  ): AdapterStepResult {
    const grads = this.gradients(model.getGrads());
    model.zeroGrad();
    const r = this.update(grads, opt);
    if (!r.skipped) model.setParams(this.merged());
    return r;
  }

  /** Global-norm clip and AdamW on the adapters (the model's own step rules); a non-finite norm changes nothing. */
  update(grads: Float32Array, opt: Pick<OptimizerConfig, "beta1" | "beta2" | "eps" | "weightDecay" | "maxGradNorm"> & { lr: number }): AdapterStepResult {
    const gradNorm = kernels.gradNorm(grads);
    if (!Number.isFinite(gradNorm)) return { gradNorm, clipped: false, step: this.step, skipped: true };
    const clipped = opt.maxGradNorm > 0 && Number.isFinite(opt.maxGradNorm) && gradNorm > opt.maxGradNorm;
    const gradScale = clipped ? opt.maxGradNorm / (gradNorm + 1e-6) : 1;
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
