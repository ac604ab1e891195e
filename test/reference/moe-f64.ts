// Float64 reference of Qwen3-MoE's sparse block and its load-balancing loss (transformers
// modeling_qwen3_moe.py at 00d4b3d2: Qwen3MoeSparseMoeBlock, load_balancing_loss_func), written to be read:
// router logits, softmax over the experts, the top-k (ties to the lower expert), renormalised when
// norm_topk_prob, each picked expert's SwiGLU MLP weighted by its probability.
import type { ModelConfig } from "../../kernels/model-config.js";

type Linear = (x: Float64Array, T: number, inDim: number, W: Float64Array, outDim: number) => Float64Array;

export function swigluMlp(
  linear: Linear,
  x: Float64Array,
  T: number,
  D: number,
  I: number,
  gate: Float64Array,
  up: Float64Array,
  down: Float64Array,
): Float64Array {
  const g = linear(x, T, D, gate, I);
  const u = linear(x, T, D, up, I);
  const act = new Float64Array(T * I);
  for (let i = 0; i < T * I; i++) act[i] = (g[i] / (1 + Math.exp(-g[i]))) * u[i];
  return linear(act, T, I, down, D);
}

/** The block's output [T, D] for x [T, D]; pushes the router's probabilities [T, E] onto `probsOut`. */
export function moeBlock(
  cfg: ModelConfig,
  linear: Linear,
  w: (name: string) => Float64Array,
  prefix: string,
  x: Float64Array,
  T: number,
  probsOut?: Float64Array[],
): Float64Array {
  const { hiddenSize: D } = cfg;
  const { numExperts: E, numExpertsPerTok: K, moeIntermediateSize: Im, normTopkProb } = cfg.moe!;
  const logits = linear(x, T, D, w(`${prefix}.mlp.gate.weight`), E);
  const probs = new Float64Array(T * E);
  const out = new Float64Array(T * D);
  for (let t = 0; t < T; t++) {
    const row = logits.subarray(t * E, (t + 1) * E);
    const max = Math.max(...row);
    const ex = Array.from(row, (z) => Math.exp(z - max));
    const sum = ex.reduce((a, b) => a + b, 0);
    for (let e = 0; e < E; e++) probs[t * E + e] = ex[e] / sum;
    const order = Array.from({ length: E }, (_, e) => e).sort((a, b) => probs[t * E + b] - probs[t * E + a] || a - b);
    const picks = order.slice(0, K);
    const total = normTopkProb ? picks.reduce((s, e) => s + probs[t * E + e], 0) : 1;
    const xt = x.subarray(t * D, (t + 1) * D);
    for (const e of picks) {
      const ep = `${prefix}.mlp.experts.${e}`;
      const y = swigluMlp(linear, xt, 1, D, Im, w(`${ep}.gate_proj.weight`), w(`${ep}.up_proj.weight`), w(`${ep}.down_proj.weight`));
      const weight = probs[t * E + e] / total;
      for (let i = 0; i < D; i++) out[t * D + i] += weight * y[i];
    }
  }
  probsOut?.push(probs);
  return out;
}

/**
 * load_balancing_loss_func over the concatenated router probabilities of every MoE layer (no padding):
 * E * sum_e f_e * P_e, f_e the share of the top-k picks that went to expert e, P_e its mean probability.
 */
export function loadBalancingLoss(cfg: ModelConfig, probs: Float64Array[]): number {
  const { numExperts: E, numExpertsPerTok: K } = cfg.moe!;
  const picks = new Float64Array(E);
  const mean = new Float64Array(E);
  let rows = 0;
  for (const p of probs) {
    const T = p.length / E;
    rows += T;
    for (let t = 0; t < T; t++) {
      const order = Array.from({ length: E }, (_, e) => e).sort((a, b) => p[t * E + b] - p[t * E + a] || a - b);
      for (const e of order.slice(0, K)) picks[e]++;
      for (let e = 0; e < E; e++) mean[e] += p[t * E + e];
    }
  }
  let s = 0;
  for (let e = 0; e < E; e++) s += (picks[e] / rows) * (mean[e] / rows);
  return E * s;
}
