// Float64 references of each layer kernel, for finite-difference gradient checks. Where the whole-model
// reference (test/reference/llama-f64.ts) already spells an operation out, it is reused as is.
import { applyRope, causalAttention, linear, logSoftmaxRow, rmsNorm, segmentStartOf, silu } from "../reference/llama-f64.js";
import type { ParsedLossSpec } from "../../kernels/loss-spec.js";

export { causalAttention, linear, rmsNorm, segmentStartOf };

export function embedding(table: Float64Array, D: number, ids: Int32Array): Float64Array {
  const out = new Float64Array(ids.length * D);
  ids.forEach((id, t) => out.set(table.subarray(id * D, (id + 1) * D), t * D));
  return out;
}

export function residualRmsNorm(x: Float64Array, res: Float64Array, T: number, D: number, w: Float64Array, eps: number): { r: Float64Array; y: Float64Array } {
  const r = new Float64Array(T * D);
  for (let i = 0; i < r.length; i++) r[i] = x[i] + res[i];
  return { r, y: rmsNorm(r, T, D, w, eps) };
}

export function rope(x: Float64Array, T: number, H: number, hd: number, positions: Int32Array, theta: number): Float64Array {
  const y = Float64Array.from(x);
  for (let t = 0; t < T; t++) for (let h = 0; h < H; h++) applyRope(y, (t * H + h) * hd, hd, positions[t], theta);
  return y;
}

export function swiglu(gate: Float64Array, up: Float64Array): Float64Array {
  return gate.map((g, i) => silu(g) * up[i]);
}

/** A parsed loss spec (every parameter present: the reference has no defaults of its own) and the normalizer. */
export type RefLossArgs = ParsedLossSpec & { normalizer: number };

export interface RefLossOut {
  loss: number;
  lossTokens: number;
  maskedTokens: number;
  entropySum: number;
  mismatchKlSum: number;
  logpSum: number;
  logprobs: Float64Array;
}

/**
 * The losses over rows of logits [N, V] (row r predicts targets[r] when mask[r]), written from their
 * definitions: ratio = exp(logp - samplerLogp), k3 = ratio - log(ratio) - 1.
 */
export function lossFromLogits(
  logits: Float64Array,
  N: number,
  V: number,
  targets: Int32Array,
  mask: Uint8Array,
  adv: Float64Array,
  slp: Float64Array,
  a: RefLossArgs,
): RefLossOut {
  const out: RefLossOut = { loss: 0, lossTokens: 0, maskedTokens: 0, entropySum: 0, mismatchKlSum: 0, logpSum: 0, logprobs: new Float64Array(N) };
  for (let r = 0; r < N; r++) {
    if (!mask[r]) continue;
    const lsm = logSoftmaxRow(logits, r * V, V);
    const logp = lsm[targets[r]];
    out.logprobs[r] = logp;
    out.lossTokens++;
    out.logpSum += logp;
    let ent = 0;
    for (let j = 0; j < V; j++) ent -= Math.exp(lsm[j]) * lsm[j];
    out.entropySum += ent;
    if (a.name === "sft") {
      out.loss -= logp;
      continue;
    }
    const d = logp - slp[r];
    const ratio = Math.exp(d);
    const k3 = ratio - d - 1;
    out.mismatchKlSum += k3;
    if (a.name === "dppo" || a.name === "ipo") {
      const diff = Math.exp(logp) - Math.exp(slp[r]);
      const masked = a.name === "dppo" ? (adv[r] > 0 ? diff > a.probDiffHigh : -diff > a.probDiffLow) : Math.abs(diff) > a.threshold;
      if (masked) out.maskedTokens++;
      out.loss += -(masked ? 0 : ratio * adv[r]) + a.klTau * d * d;
      continue;
    }
    if (a.name === "gspo") throw new Error("gspo is a sequence-level loss: its reference is in the gspo test");
    const { maskLow: lo, maskHigh: hi, klCoef: kl } = a;
    if (ratio < lo || ratio > hi) {
      out.maskedTokens++;
      continue;
    }
    if (a.name === "rl") out.loss += -ratio * adv[r] + kl * k3;
    else {
      const clipped = Math.min(Math.max(ratio, 1 - a.clipEps), 1 + a.clipEpsHigh);
      out.loss += -Math.min(ratio * adv[r], clipped * adv[r]) + kl * k3;
    }
  }
  out.loss /= a.normalizer;
  return out;
}
