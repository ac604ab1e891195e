// GSPO (group sequence policy optimization): the importance ratio of a whole sequence, not of each token,
//   s_i = exp( mean over sequence i's loss tokens of (logp_t - samplerLogp_t) ),
//   loss = -(1 / #sequences) * sum_i min(s_i * A_i, clip(s_i, 1 - clipEps, 1 + clipEpsHigh) * A_i).
// Its gradient in token t's logp is -A_i * s_i / |y_i| / #sequences while the unclipped term is the smaller
// one, else 0. The fused kernels compute one token at a time, so GSPO runs in two passes over the same
// micro-batches: the first only reads the learner's token logprobs (its gradient is discarded), then each
// token gets that coefficient as its "advantage" and the current logprob as its "sampler logprob" under the
// plain rl loss with masking off, whose gradient -ratio * A is then exactly -A (ratio = 1). Twice the work of
// a token-level loss per step. A micro-batch's coefficients need only its own logprobs and two counts of the whole
// step (its loss tokens and its sequences), so learner ranks each compute those of their own micro-batches once the
// sequence count is all-reduced. These are the pure parts; train-step.ts runs the passes.
import type { PackedMicroBatch } from "./packing.js";

export interface GspoSpec {
  clipEps: number;
  clipEpsHigh: number;
}

/** The step's GSPO figures, summed one micro-batch at a time (learner ranks: each over its own, then all-reduced). */
export interface GspoSums {
  /** The GSPO loss (what the second pass's kernel value cannot show for clipped sequences). */
  loss: number;
  /** Loss tokens of sequences whose clipped term won (no gradient). */
  clippedTokens: number;
  /** Sum over loss tokens of exp(d) - d - 1 (the sampler/learner mismatch, as the other losses report it). */
  mismatchKlSum: number;
}

/** Sequence spans of a micro-batch: [start, end) per segment. */
function segments(mb: PackedMicroBatch): Array<[number, number]> {
  const starts = Array.from(mb.segmentStarts);
  return starts.map((s, i) => [s, i + 1 < starts.length ? starts[i + 1]! : mb.tokens.length]);
}

/** Sequences with at least one loss token among `mbs` (GSPO's 1 / #sequences counts those of the whole step). */
export function gspoSequenceCount(mbs: PackedMicroBatch[]): number {
  return mbs.reduce((n, mb) => n + segments(mb).filter(([a, b]) => mb.lossMask.subarray(a, b).some((x) => x === 1)).length, 0);
}

/**
 * One micro-batch's second-pass advantages (one per token; 0 off the loss tokens and on clipped sequences) from its
 * first-pass token logprobs, given the step's loss-token `normalizer` (the kernels divide every token's loss by it) and
 * its `sequences` (both counted over the whole step, not this micro-batch); its figures are added to `sums`.
 */
export function gspoMicroBatch(mb: PackedMicroBatch, logp: Float32Array, spec: GspoSpec, normalizer: number, sequences: number, sums: GspoSums): Float32Array {
  const coef = new Float32Array(mb.tokens.length);
  for (const [a, b] of segments(mb)) {
    let sum = 0,
      n = 0;
    for (let t = a; t < b; t++) {
      if (!mb.lossMask[t]) continue;
      const d = logp[t]! - mb.samplerLogprobs[t]!;
      sum += d;
      sums.mismatchKlSum += Math.exp(d) - d - 1;
      n++;
    }
    if (n === 0) continue;
    // One advantage per sequence (the group-relative one every token of the sample carries).
    let A = 0;
    for (let t = a; t < b; t++)
      if (mb.lossMask[t]) {
        A = mb.advantages[t]!;
        break;
      }
    const s = Math.exp(sum / n);
    const clipped = Math.min(Math.max(s, 1 - spec.clipEps), 1 + spec.clipEpsHigh);
    const unclippedWins = s * A <= clipped * A;
    sums.loss -= Math.min(s * A, clipped * A) / sequences;
    if (!unclippedWins) {
      sums.clippedTokens += n;
      continue;
    }
    // The kernel divides by `normalizer`; this undoes it and spreads 1/#sequences over the sequence's tokens.
    const c = (A * s * normalizer) / (n * sequences);
    for (let t = a; t < b; t++) if (mb.lossMask[t]) coef[t] = c;
  }
  return coef;
}

/** The second pass's micro-batch: the coefficients as advantages, the first pass's logprobs as sampler logprobs. */
export function secondPass(mb: PackedMicroBatch, coefficients: Float32Array, logp: Float32Array): PackedMicroBatch {
  return { ...mb, advantages: coefficients, samplerLogprobs: logp };
}

/** The plain rl loss with nothing masked and no KL: its gradient is exactly -advantage when ratio = 1. */
export const GSPO_SECOND_PASS_LOSS = { name: "rl", maskLow: 0, maskHigh: Number.POSITIVE_INFINITY, klCoef: 0 } as const;
