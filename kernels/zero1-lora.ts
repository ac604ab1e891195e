// ZeRO-1 over LoRA's adapters (learner ranks with model.lora): the vector trained is the adapters (A and B of every
// target, flat, kernels/lora.ts), not the model's flat parameters. Each rank projects its micro-batches' gradient of
// the merged weights onto the adapters, plus the dropout correction's part (LoraAdapters.gradientsOf, as one process
// does; both are linear in the micro-batches, so the ranks' sum is the step's); the adapter gradients are
// reduce-scattered, rank r runs AdamW on its contiguous slice of the adapters with that slice's moments only (1/N of
// the adapters' optimizer state), an all-gather hands every rank the new adapters, and every rank writes their merged
// weights into its model. The base weights are never written. The clip and the AdamW rules are LoraAdapters.update's
// (every adapter decays); against one rank the result agrees to float rounding for kernels/zero1.ts's reasons (the
// gradient and the norm's squares are summed in another order).
//
// Memory: the LoraAdapters object still has its full m and v (what a checkpoint encodes: rank 0 gathers into them),
// unused while the ranks train; they are the adapters' size, a few percent of the model's.
import { kernels } from "./layer-kernels.js";
import type { AdapterStepResult, LoraAdapters, LoraModel } from "./lora.js";
import type { NativeComm } from "./native.js";
import { globalNormClip, OptimizerSchema } from "./optimizer.js";
import type { StepOptions } from "./policy-model.js";
import { sliceOf } from "./zero1.js";

/** Adapter moments and step count, as LoraAdapters holds them (m, v, step) for the whole vector. */
export interface AdapterOptimizerState {
  m: Float32Array;
  v: Float32Array;
  step: number;
}

export class Zero1Adapters {
  readonly counts: number[];
  readonly offset: number;
  readonly count: number;
  /** This rank's slice of the adapters' AdamW moments. */
  readonly m: Float32Array;
  readonly v: Float32Array;
  steps = 0;

  /** Takes this rank's slice of the adapters' own moments (fresh, or restored from a checkpoint). */
  constructor(
    readonly lora: LoraAdapters,
    private readonly model: LoraModel,
    readonly comm: NativeComm,
    readonly rank: number,
    readonly size: number,
  ) {
    ({ counts: this.counts, offset: this.offset, count: this.count } = sliceOf(lora.params.length, size, rank));
    this.m = new Float32Array(this.count);
    this.v = new Float32Array(this.count);
    this.restore({ m: lora.m, v: lora.v, step: lora.step });
  }

  /** Sum the ranks' adapter gradients, clip by the global norm, AdamW on this rank's slice, gather and merge the adapters. */
  step(opt: StepOptions): AdapterStepResult {
    const d = OptimizerSchema.parse({ lr: opt.lr });
    const local = this.lora.gradientsOf(this.model);
    this.model.zeroGrad();
    const g = new Float32Array(this.count);
    this.comm.reduceScatter(local, g, this.counts);
    const sq = new Float64Array(1);
    for (let i = 0; i < g.length; i++) sq[0]! += g[i]! * g[i]!;
    this.comm.allReduceSum(sq);
    const norm = Math.sqrt(sq[0]!);
    if (!Number.isFinite(norm)) return { gradNorm: norm, clipped: false, skipped: true, step: this.steps };
    const { clipped, gradScale } = globalNormClip(norm, opt.maxGradNorm ?? d.maxGradNorm);
    this.steps++;
    const mine = this.lora.params.slice(this.offset, this.offset + this.count);
    if (this.count > 0)
      kernels.adamw(mine, g, this.m, this.v, {
        lr: opt.lr,
        beta1: opt.beta1 ?? d.beta1,
        beta2: opt.beta2 ?? d.beta2,
        eps: opt.eps ?? d.eps,
        weightDecay: opt.weightDecay ?? d.weightDecay,
        step: this.steps,
        gradScale,
      });
    this.comm.allGather(mine, this.lora.params, this.counts);
    this.lora.load(this.model);
    return { gradNorm: norm, clipped, skipped: false, step: this.steps };
  }

  /** The adapters' whole optimizer state, gathered on every rank (what a checkpoint holds: restorable onto any rank count). */
  fullState(): AdapterOptimizerState {
    const n = this.lora.params.length;
    const m = new Float32Array(n);
    const v = new Float32Array(n);
    this.comm.allGather(this.m, m, this.counts);
    this.comm.allGather(this.v, v, this.counts);
    return { m, v, step: this.steps };
  }

  /** Takes this rank's slice of a full adapter optimizer state (written by any number of ranks, or by one). */
  restore(state: AdapterOptimizerState): void {
    this.m.set(state.m.subarray(this.offset, this.offset + this.count));
    this.v.set(state.v.subarray(this.offset, this.offset + this.count));
    this.steps = state.step;
  }
}
