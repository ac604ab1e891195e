// Data-parallel learner ranks with a ZeRO-1 optimizer (after llm.c's multi-GPU path): every rank holds the whole
// model and computes gradients on its share of a step's micro-batches; the gradient is summed by a reduce-scatter,
// so rank r receives only its contiguous slice of the flat buffer; rank r keeps the AdamW moments of that slice only
// (1/N of the optimizer state: the native model frees the rest, rs_model_shard_optimizer), updates its slice of the
// parameters, and an all-gather hands every rank the whole new parameters. The global grad-norm clip sums the
// slices' squares over ranks. The collectives run on the model's own buffers (no whole copy crosses into JS): MPI,
// or NCCL on the GPU's (kernels/rank-collectives.ts).
//
// Against one rank on the same global batch the result agrees to float rounding, not bit for bit: the gradient is
// summed in another order (each rank's micro-batches, then across ranks) and the norm's sum of squares is split
// differently. The per-element AdamW is the same kernel as the model's own step.
import type { NativeComm } from "./native.js";
import type { OptimizerState, PolicyModel, StepOptions, StepResult } from "./policy-model.js";
import { chooseCollectives, type RankCollectives } from "./rank-collectives.js";

/** Contiguous, near-equal slices of n values over `size` ranks (the first n % size get one more). */
export function sliceCounts(n: number, size: number): number[] {
  return Array.from({ length: size }, (_, r) => Math.floor(n / size) + (r < n % size ? 1 : 0));
}

/** Every rank's slice count, and where rank `rank`'s slice starts and how long it is. */
export function sliceOf(n: number, size: number, rank: number): { counts: number[]; offset: number; count: number } {
  const counts = sliceCounts(n, size);
  return { counts, offset: counts.slice(0, rank).reduce((a, b) => a + b, 0), count: counts[rank]! };
}

export class Zero1Optimizer {
  readonly counts: number[];
  readonly offset: number;
  readonly count: number;
  private chosen: RankCollectives | null = null;

  /** Shards the model's moments (it keeps its current values on this rank's slice); a collective: every rank calls it. */
  constructor(
    private readonly model: PolicyModel,
    readonly comm: NativeComm,
    readonly rank: number,
    readonly size: number,
  ) {
    ({ counts: this.counts, offset: this.offset, count: this.count } = sliceOf(model.numParams, size, rank));
    model.shardOptimizer(this.offset, this.count);
  }

  /**
   * MPI on host buffers, or NCCL on the GPU's (kernels/rank-collectives.ts), agreed at the first step: a collective
   * the ranks enter together there, not at start, where followers would spin in it while rank 0 waits for its lease.
   */
  get collectives(): RankCollectives {
    this.chosen ??= chooseCollectives(this.model, this.comm, this.rank, this.size);
    return this.chosen;
  }

  /** Optimizer steps taken so far. */
  get steps(): number {
    return this.model.exportStepCount();
  }

  /** This rank's slice of the AdamW moments (a copy). */
  moments(): { m: Float32Array; v: Float32Array } {
    return this.model.readMoments(this.offset, this.count);
  }

  /** Sum the ranks' gradients, clip by the global norm, AdamW on this rank's slice, gather the parameters. */
  async step(opt: StepOptions): Promise<StepResult> {
    const sq = new Float64Array([this.collectives.reduceScatterGrads(this.counts)]);
    this.comm.allReduceSum(sq);
    const r = await this.model.shardStep(opt, Math.sqrt(sq[0]!));
    if (!r.skipped) this.collectives.allGatherParams(this.counts);
    return r;
  }

  /** The whole optimizer state, gathered on every rank (what a checkpoint holds: restorable onto any rank count). */
  fullState(): OptimizerState {
    const mine = this.moments();
    const m = new Float32Array(this.model.numParams);
    const v = new Float32Array(this.model.numParams);
    this.comm.allGather(mine.m, m, this.counts);
    this.comm.allGather(mine.v, v, this.counts);
    return { m, v, step: this.steps };
  }

  /**
   * Rank 0's whole moments (`m`, `v` on rank 0 only) to every rank's slice, one slice at a time: a follower never holds
   * more than one slice of one moment at once. A collective: every rank calls it.
   */
  scatter(state: { m?: Float32Array; v?: Float32Array; step: number }): void {
    const mine: { m: Float32Array<ArrayBufferLike>; v: Float32Array<ArrayBufferLike> } = { m: new Float32Array(0), v: new Float32Array(0) };
    for (const key of ["m", "v"] as const)
      this.counts.forEach((count, r) => {
        const at = sliceOf(this.model.numParams, this.size, r).offset;
        const buf = this.rank === 0 ? state[key]!.subarray(at, at + count) : new Float32Array(count);
        this.comm.bcast(buf, 0);
        if (r === this.rank) mine[key] = buf;
      });
    this.model.writeMoments(this.offset, mine.m, mine.v, state.step);
  }

  /** Takes this rank's slice of a whole optimizer state (written by any number of ranks, or by one). */
  restore(state: OptimizerState): void {
    this.model.importOptimizerState(state);
  }

  /** Fresh moments (zeros) and step count 0 on this rank's slice. */
  reset(): void {
    this.model.resetOptimizer();
  }
}
