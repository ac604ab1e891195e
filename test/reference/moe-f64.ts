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

/** Indices of the k largest of xs (ties: the lower index first). */
function topK(xs: ArrayLike<number>, k: number): number[] {
  return Array.from({ length: xs.length }, (_, i) => i)
    .sort((a, b) => xs[b]! - xs[a]! || a - b)
    .slice(0, k);
}

/** Qwen3-MoE: softmax probabilities, the top-k, renormalised when normTopkProb. */
function routeSoftmax(cfg: ModelConfig, logits: Float64Array): { probs: Float64Array; picks: number[]; weights: number[] } {
  const max = Math.max(...logits);
  const ex = Array.from(logits, (z) => Math.exp(z - max));
  const sum = ex.reduce((a, b) => a + b, 0);
  const probs = Float64Array.from(ex, (x) => x / sum);
  const picks = topK(probs, cfg.moe!.numExpertsPerTok);
  const total = cfg.moe!.normTopkProb ? picks.reduce((s, e) => s + probs[e]!, 0) : 1;
  return { probs, picks, weights: picks.map((e) => probs[e]! / total) };
}

/** GLM-4-MoE: sigmoid scores; the choice on scores + bias within the best groups (others score 0); weights from scores. */
function routeSigmoid(cfg: ModelConfig, logits: Float64Array, bias: Float64Array): { probs: Float64Array; picks: number[]; weights: number[] } {
  const m = cfg.moe!;
  const { nGroup: G, topkGroup, routedScalingFactor } = m.sigmoid!;
  const probs = Float64Array.from(logits, (z) => 1 / (1 + Math.exp(-z)));
  const choice = Float64Array.from(probs, (p, e) => p + bias[e]!);
  const per = m.numExperts / G;
  const groupScore = Array.from({ length: G }, (_, g) => {
    const sub = choice.subarray(g * per, (g + 1) * per);
    return topK(sub, 2).reduce((s, i) => s + sub[i]!, 0);
  });
  const keep = new Set(G > 1 ? topK(groupScore, topkGroup) : [0]);
  const masked = Float64Array.from(choice, (c, e) => (keep.has(Math.floor(e / per)) ? c : 0));
  const picks = topK(masked, m.numExpertsPerTok);
  const total = m.normTopkProb ? picks.reduce((s, e) => s + probs[e]!, 0) + 1e-20 : 1;
  return { probs, picks, weights: picks.map((e) => (probs[e]! / total) * routedScalingFactor) };
}

/** The block's output [T, D] for x [T, D]; pushes the router's probabilities (or sigmoid scores) [T, E] onto `probsOut`. */
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
  const { numExperts: E, moeIntermediateSize: Im } = cfg.moe!;
  const logits = linear(x, T, D, w(`${prefix}.mlp.gate.weight`), E);
  const probs = new Float64Array(T * E);
  const out = new Float64Array(T * D);
  for (let t = 0; t < T; t++) {
    const row = logits.subarray(t * E, (t + 1) * E);
    const r = cfg.moe!.sigmoid ? routeSigmoid(cfg, row, w(`${prefix}.mlp.gate.e_score_correction_bias`)) : routeSoftmax(cfg, row);
    probs.set(r.probs, t * E);
    const xt = x.subarray(t * D, (t + 1) * D);
    r.picks.forEach((e, k) => {
      const ep = `${prefix}.mlp.experts.${e}`;
      const y = swigluMlp(linear, xt, 1, D, Im, w(`${ep}.gate_proj.weight`), w(`${ep}.up_proj.weight`), w(`${ep}.down_proj.weight`));
      for (let i = 0; i < D; i++) out[t * D + i] += r.weights[k]! * y[i]!;
    });
  }
  const Is = Im * (cfg.moe!.nSharedExperts ?? 0);
  if (Is > 0) {
    const sp = `${prefix}.mlp.shared_experts`;
    const y = swigluMlp(linear, x, T, D, Is, w(`${sp}.gate_proj.weight`), w(`${sp}.up_proj.weight`), w(`${sp}.down_proj.weight`));
    for (let i = 0; i < T * D; i++) out[i] += y[i]!;
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
