// Data-parallel learner ranks with a ZeRO-1 optimizer (after llm.c's multi-GPU path): every rank holds the whole
// model and computes gradients on its share of a step's micro-batches; the gradient is summed by a reduce-scatter,
// so rank r receives only its contiguous slice of the flat buffer; rank r keeps the AdamW moments of that slice only
// (1/N of the optimizer state), updates its slice of the parameters, and an all-gather hands every rank the whole
// new parameters. The global grad-norm clip sums the slices' squares over ranks.
//
// Against one rank on the same global batch the result agrees to float rounding, not bit for bit: the gradient is
// summed in another order (each rank's micro-batches, then across ranks) and the norm's sum of squares is split
// differently. The per-element AdamW is the same kernel (kernels.adamw) as the model's own step.
//
// Memory: the moments this optimizer keeps are 1/N of the model's, but the native model still allocates its own
// full AdamM/AdamV buffers (it has one flat allocation per kind), unused while a rank trains; the saving is real only
// once the model can be created without them.
import type { NativeComm } from "./native.js";
import { kernels } from "./layer-kernels.js";
import type { PolicyModel, StepOptions, StepResult } from "./policy-model.js";
import { OptimizerSchema } from "./optimizer.js";

/** Contiguous, near-equal slices of n values over `size` ranks (the first n % size get one more). */
export function sliceCounts(n: number, size: number): number[] {
  return Array.from({ length: size }, (_, r) => Math.floor(n / size) + (r < n % size ? 1 : 0));
}

export class Zero1Optimizer {
  readonly counts: number[];
  readonly offset: number;
  readonly count: number;
  /** This rank's slice of the AdamW moments. */
  readonly m: Float32Array;
  readonly v: Float32Array;
  steps = 0;

  constructor(
    private readonly model: PolicyModel,
    readonly comm: NativeComm,
    readonly rank: number,
    readonly size: number,
  ) {
    this.counts = sliceCounts(model.numParams, size);
    this.offset = this.counts.slice(0, rank).reduce((a, b) => a + b, 0);
    this.count = this.counts[rank]!;
    this.m = new Float32Array(this.count);
    this.v = new Float32Array(this.count);
  }

  /** Sum the ranks' gradients, clip by the global norm, AdamW on this rank's slice, gather the parameters. */
  step(opt: StepOptions): StepResult {
    const d = OptimizerSchema.parse({ lr: opt.lr });
    const g = new Float32Array(this.count);
    this.comm.reduceScatter(this.model.getGrads(), g, this.counts);
    const sq = new Float64Array(1);
    for (let i = 0; i < g.length; i++) sq[0]! += g[i]! * g[i]!;
    this.comm.allReduceSum(sq);
    const norm = Math.sqrt(sq[0]!);
    this.model.zeroGrad();
    if (!Number.isFinite(norm)) return { gradNorm: norm, clipped: false, skipped: true, step: this.steps };
    const maxNorm = opt.maxGradNorm ?? d.maxGradNorm;
    const clipped = maxNorm > 0 && Number.isFinite(maxNorm) && norm > maxNorm;
    // The model step's float arithmetic: scale = (float)(max / (norm + 1e-6)).
    const gradScale = clipped ? Math.fround(maxNorm / (norm + 1e-6)) : 1;
    this.steps++;
    const params = this.model.getParams();
    const mine = params.slice(this.offset, this.offset + this.count);
    for (const t of this.model.tensors()) {
      const a = Math.max(t.offset, this.offset) - this.offset;
      const b = Math.min(t.offset + t.size, this.offset + this.count) - this.offset;
      if (a >= b) continue;
      kernels.adamw(mine.subarray(a, b), g.subarray(a, b), this.m.subarray(a, b), this.v.subarray(a, b), {
        lr: opt.lr,
        beta1: opt.beta1 ?? d.beta1,
        beta2: opt.beta2 ?? d.beta2,
        eps: opt.eps ?? d.eps,
        weightDecay: t.weightDecay ? (opt.weightDecay ?? d.weightDecay) : 0,
        step: this.steps,
        gradScale,
      });
    }
    this.comm.allGather(mine, params, this.counts);
    this.model.setParams(params);
    return { gradNorm: norm, clipped, skipped: false, step: this.steps };
  }

  /** The whole optimizer state, gathered on every rank (what a checkpoint holds: restorable onto any rank count). */
  fullState(): { m: Float32Array; v: Float32Array; step: number } {
    const m = new Float32Array(this.model.numParams);
    const v = new Float32Array(this.model.numParams);
    this.comm.allGather(this.m, m, this.counts);
    this.comm.allGather(this.v, v, this.counts);
    return { m, v, step: this.steps };
  }

  /** Takes this rank's slice of a full optimizer state (written by any number of ranks, or by one). */
  restore(state: { m: Float32Array; v: Float32Array; step: number }): void {
    this.m.set(state.m.subarray(this.offset, this.offset + this.count));
    this.v.set(state.v.subarray(this.offset, this.offset + this.count));
    this.steps = state.step;
  }
}
