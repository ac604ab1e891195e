// Float64 reference of the Llama-style decoder (what HF's LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM
// compute), written to be read, not to be fast. The native kernels and the losses are checked against it, so every
// step is spelled out plainly, one function per operation, with no fusion and no cleverness.
//
// Tensors use HF names and row-major HF shapes; Linear is y = x W^T + b with W of shape [out, in].
// Input is packed: several sequences ("segments") laid end to end; positions restart at 0 at each segment
// start and no token attends across a segment boundary.
import { headDimOf, type ModelConfig, moeLayerFlags } from "../../kernels/model-config.js";
import { moeBlock, swigluMlp } from "./moe-f64.js";
import { mulberry32 } from "../helpers/rng.js";

export type Weights = Map<string, Float64Array>;

// ---------------------------------------------------------------------------------------------- shapes

/** Every parameter the model reads, with its HF name and shape, in HF's order. */
export function weightShapes(cfg: ModelConfig): Map<string, number[]> {
  const { vocabSize: V, hiddenSize: D, intermediateSize: I, numHeads: H, numKvHeads: KV } = cfg;
  const hd = headDimOf(cfg);
  const shapes = new Map<string, number[]>();
  shapes.set("model.embed_tokens.weight", [V, D]);
  for (let l = 0; l < cfg.numLayers; l++) {
    const p = `model.layers.${l}`;
    shapes.set(`${p}.input_layernorm.weight`, [D]);
    shapes.set(`${p}.self_attn.q_proj.weight`, [H * hd, D]);
    shapes.set(`${p}.self_attn.k_proj.weight`, [KV * hd, D]);
    shapes.set(`${p}.self_attn.v_proj.weight`, [KV * hd, D]);
    if (cfg.attentionBias) {
      shapes.set(`${p}.self_attn.q_proj.bias`, [H * hd]);
      shapes.set(`${p}.self_attn.k_proj.bias`, [KV * hd]);
      shapes.set(`${p}.self_attn.v_proj.bias`, [KV * hd]);
    }
    shapes.set(`${p}.self_attn.o_proj.weight`, [D, H * hd]);
    if (cfg.qkNorm) {
      shapes.set(`${p}.self_attn.q_norm.weight`, [hd]);
      shapes.set(`${p}.self_attn.k_norm.weight`, [hd]);
    }
    shapes.set(`${p}.post_attention_layernorm.weight`, [D]);
    if (moeLayerFlags(cfg)?.[l] && cfg.moe) {
      const { numExperts: E, moeIntermediateSize: Im } = cfg.moe;
      shapes.set(`${p}.mlp.gate.weight`, [E, D]);
      if (cfg.moe.sigmoid) shapes.set(`${p}.mlp.gate.e_score_correction_bias`, [E]);
      const Is = Im * (cfg.moe.nSharedExperts ?? 0);
      if (Is > 0) {
        shapes.set(`${p}.mlp.shared_experts.gate_proj.weight`, [Is, D]);
        shapes.set(`${p}.mlp.shared_experts.up_proj.weight`, [Is, D]);
        shapes.set(`${p}.mlp.shared_experts.down_proj.weight`, [D, Is]);
      }
      for (let e = 0; e < E; e++) {
        shapes.set(`${p}.mlp.experts.${e}.gate_proj.weight`, [Im, D]);
        shapes.set(`${p}.mlp.experts.${e}.up_proj.weight`, [Im, D]);
        shapes.set(`${p}.mlp.experts.${e}.down_proj.weight`, [D, Im]);
      }
      continue;
    }
    shapes.set(`${p}.mlp.gate_proj.weight`, [I, D]);
    shapes.set(`${p}.mlp.up_proj.weight`, [I, D]);
    shapes.set(`${p}.mlp.down_proj.weight`, [D, I]);
  }
  shapes.set("model.norm.weight", [D]);
  if (!cfg.tieWordEmbeddings) shapes.set("lm_head.weight", [V, D]);
  return shapes;
}

/**
 * Random weights scaled so activations stay O(1) and attention is far from uniform, which makes gradient
 * checks sensitive: matrices ~ U(-1,1)/sqrt(fan_in) * 2, embeddings ~ U(-1,1), norm weights ~ 1 + U(-0.2,0.2),
 * biases ~ U(-0.2,0.2).
 */
export function randomWeights(cfg: ModelConfig, seed: number): Weights {
  const rand = mulberry32(seed);
  const uniform = () => rand() * 2 - 1;
  const weights: Weights = new Map();
  for (const [name, shape] of weightShapes(cfg)) {
    const n = shape.reduce((a, b) => a * b, 1);
    const w = new Float64Array(n);
    if (name.endsWith("norm.weight")) for (let i = 0; i < n; i++) w[i] = 1 + 0.2 * uniform();
    else if (name.endsWith("bias")) for (let i = 0; i < n; i++) w[i] = 0.2 * uniform();
    else if (name === "model.embed_tokens.weight") for (let i = 0; i < n; i++) w[i] = uniform();
    else {
      const scale = 2 / Math.sqrt(shape[1]);
      for (let i = 0; i < n; i++) w[i] = scale * uniform();
    }
    weights.set(name, w);
  }
  return weights;
}

// ------------------------------------------------------------------------------------------ operations

/** y[t, o] = sum_i x[t, i] * W[o, i] + b[o];  x: [T, inDim], W: [outDim, inDim]. */
export function linear(x: Float64Array, T: number, inDim: number, W: Float64Array, outDim: number, b?: Float64Array): Float64Array {
  const y = new Float64Array(T * outDim);
  for (let t = 0; t < T; t++) {
    for (let o = 0; o < outDim; o++) {
      let s = b ? b[o] : 0;
      for (let i = 0; i < inDim; i++) s += x[t * inDim + i] * W[o * inDim + i];
      y[t * outDim + o] = s;
    }
  }
  return y;
}

/** Per row: x / sqrt(mean(x^2) + eps) * w. */
export function rmsNorm(x: Float64Array, T: number, D: number, w: Float64Array, eps: number): Float64Array {
  const y = new Float64Array(T * D);
  for (let t = 0; t < T; t++) {
    let ss = 0;
    for (let i = 0; i < D; i++) ss += x[t * D + i] ** 2;
    const inv = 1 / Math.sqrt(ss / D + eps);
    for (let i = 0; i < D; i++) y[t * D + i] = x[t * D + i] * inv * w[i];
  }
  return y;
}

/**
 * RoPE in HF's rotate-half convention, in place on one head vector x[off .. off+hd):
 *   x' = x * cos + rotate_half(x) * sin,  rotate_half(x) = [-x[hd/2:], x[:hd/2]],
 * where element i and element i + hd/2 share the angle position * theta^(-2i/hd).
 */
export function applyRope(x: Float64Array, off: number, hd: number, position: number, theta: number, rotary = hd): void {
  // Partial RoPE (GLM): only the first `rotary` dims rotate, with frequencies of a head that wide.
  const half = rotary / 2;
  for (let i = 0; i < half; i++) {
    const angle = position * theta ** (-(2 * i) / rotary);
    const c = Math.cos(angle);
    const s = Math.sin(angle);
    const a = x[off + i];
    const b = x[off + i + half];
    x[off + i] = a * c - b * s;
    x[off + i + half] = b * c + a * s;
  }
}

export function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/** For each token, the index of the first token of its segment. Validates segmentStarts. */
export function segmentStartOf(T: number, segmentStarts: Int32Array): Int32Array {
  if (T > 0 && (segmentStarts.length === 0 || segmentStarts[0] !== 0)) {
    throw new Error(`segmentStarts must begin with 0 (got [${Array.from(segmentStarts.slice(0, 4)).join(", ")}${segmentStarts.length > 4 ? ", ..." : ""}])`);
  }
  for (let i = 1; i < segmentStarts.length; i++) {
    if (!(segmentStarts[i] > segmentStarts[i - 1])) throw new Error(`segmentStarts must be strictly increasing (index ${i}: ${segmentStarts[i]})`);
  }
  if (segmentStarts.length > 0 && segmentStarts[segmentStarts.length - 1] >= Math.max(T, 1)) {
    throw new Error(`segmentStarts[${segmentStarts.length - 1}] = ${segmentStarts[segmentStarts.length - 1]} is not below the token count ${T}`);
  }
  const start = new Int32Array(T);
  let seg = 0;
  for (let t = 0; t < T; t++) {
    if (seg + 1 < segmentStarts.length && segmentStarts[seg + 1] === t) seg++;
    start[t] = segmentStarts[seg];
  }
  return start;
}

/**
 * Causal attention inside each segment, GQA: query head h reads kv head floor(h / (H / KV)).
 * q: [T, H*hd] (already rotated), k, v: [T, KV*hd] (k already rotated). Returns [T, H*hd].
 */
export function causalAttention(
  q: Float64Array,
  k: Float64Array,
  v: Float64Array,
  T: number,
  H: number,
  KV: number,
  hd: number,
  segStart: Int32Array,
  prefixOf?: (t: number) => number[],
): Float64Array {
  const out = new Float64Array(T * H * hd);
  const groupSize = H / KV;
  const scale = 1 / Math.sqrt(hd);
  for (let t = 0; t < T; t++) {
    // The keys token t sees: its parent segment's tokens (group-prefix packing), then its own segment up to t.
    const keys = [...(prefixOf?.(t) ?? [])];
    for (let s = segStart[t]; s <= t; s++) keys.push(s);
    for (let h = 0; h < H; h++) {
      const kvh = Math.floor(h / groupSize);
      const scores = new Float64Array(keys.length);
      let max = -Infinity;
      keys.forEach((s, j) => {
        let dot = 0;
        for (let i = 0; i < hd; i++) dot += q[(t * H + h) * hd + i] * k[(s * KV + kvh) * hd + i];
        scores[j] = dot * scale;
        max = Math.max(max, scores[j]);
      });
      let sum = 0;
      for (let j = 0; j < scores.length; j++) {
        scores[j] = Math.exp(scores[j] - max);
        sum += scores[j];
      }
      keys.forEach((s, j) => {
        const p = scores[j] / sum;
        for (let i = 0; i < hd; i++) out[(t * H + h) * hd + i] += p * v[(s * KV + kvh) * hd + i];
      });
    }
  }
  return out;
}

// --------------------------------------------------------------------------------------------- forward

function get(weights: Weights, name: string, cfg: ModelConfig): Float64Array {
  const w = weights.get(name);
  if (!w) throw new Error(`reference model: missing weight "${name}"`);
  const expected = weightShapes(cfg)
    .get(name)!
    .reduce((a, b) => a * b, 1);
  if (w.length !== expected) throw new Error(`reference model: weight "${name}" has ${w.length} values, expected ${expected}`);
  return w;
}

/**
 * Group-prefix packing (kernels.h, seg_parent): per segment -1 or the index of an earlier segment whose tokens it
 * continues (it sees them all, its positions continue from their count). `positions` overrides every token's RoPE
 * position (for controls: a layout with the right mask and wrong positions).
 */
export interface LayoutOptions {
  segmentParents?: Int32Array;
  positions?: Int32Array;
}

/** forwardLogits' options: the layout, and routerProbs, which receives each MoE layer's router probabilities [T, E]. */
export interface ForwardOptions extends LayoutOptions {
  routerProbs?: Float64Array[];
  /** Replaces `linear` for the dense layers' projections (q/k/v/o, gate/up/down), e.g. to add LoRA adapters. */
  linear?: typeof linear;
}

/** Per token: the parent's token indices it sees, and its position. */
function layoutOf(T: number, segmentStarts: Int32Array, opts: LayoutOptions) {
  const segStart = segmentStartOf(T, segmentStarts);
  const segIndex = (t: number) => {
    let i = 0;
    while (i + 1 < segmentStarts.length && segmentStarts[i + 1] <= t) i++;
    return i;
  };
  const segEnd = (s: number) => (s + 1 < segmentStarts.length ? segmentStarts[s + 1] : T);
  const parentRange = (t: number): [number, number] => {
    const p = opts.segmentParents?.[segIndex(t)] ?? -1;
    return p < 0 ? [0, 0] : [segmentStarts[p], segEnd(p)];
  };
  const prefixOf = (t: number) => {
    const [b, e] = parentRange(t);
    return Array.from({ length: e - b }, (_, i) => b + i);
  };
  const position = (t: number) => opts.positions?.[t] ?? parentRange(t)[1] - parentRange(t)[0] + t - segStart[t];
  // The row whose logits predict token t: t - 1, the parent's last token for a child's first, none for a root's first.
  const predictor = (t: number) => (segStart[t] !== t ? t - 1 : parentRange(t)[1] - 1);
  return { segStart, prefixOf, position, predictor };
}

/** Logits [T * V] for a packed batch. */
export function forwardLogits(cfg: ModelConfig, weights: Weights, tokens: Int32Array, segmentStarts: Int32Array, opts: ForwardOptions = {}): Float64Array {
  const { vocabSize: V, hiddenSize: D, intermediateSize: I, numHeads: H, numKvHeads: KV } = cfg;
  const hd = headDimOf(cfg);
  const T = tokens.length;
  const { segStart, prefixOf, position } = layoutOf(T, segmentStarts, opts);
  const w = (name: string) => get(weights, name, cfg);
  const maybe = (name: string) => (cfg.attentionBias ? w(name) : undefined);
  const proj = opts.linear ?? linear;

  const embed = w("model.embed_tokens.weight");
  const x = new Float64Array(T * D);
  for (let t = 0; t < T; t++) {
    const id = tokens[t];
    if (!(id >= 0 && id < V)) throw new Error(`token ${id} at position ${t} is outside the vocab [0, ${V})`);
    x.set(embed.subarray(id * D, (id + 1) * D), t * D);
  }

  for (let l = 0; l < cfg.numLayers; l++) {
    const p = `model.layers.${l}`;
    // Attention block: x += o_proj(attention(rope(q), rope(k), v)) on the normed input.
    const h = rmsNorm(x, T, D, w(`${p}.input_layernorm.weight`), cfg.rmsNormEps);
    let q = proj(h, T, D, w(`${p}.self_attn.q_proj.weight`), H * hd, maybe(`${p}.self_attn.q_proj.bias`));
    let k = proj(h, T, D, w(`${p}.self_attn.k_proj.weight`), KV * hd, maybe(`${p}.self_attn.k_proj.bias`));
    if (cfg.qkNorm) {
      // Qwen3: RMSNorm over each head vector (one weight of hd shared by the heads), before RoPE.
      q = rmsNorm(q, T * H, hd, w(`${p}.self_attn.q_norm.weight`), cfg.rmsNormEps);
      k = rmsNorm(k, T * KV, hd, w(`${p}.self_attn.k_norm.weight`), cfg.rmsNormEps);
    }
    const v = proj(h, T, D, w(`${p}.self_attn.v_proj.weight`), KV * hd, maybe(`${p}.self_attn.v_proj.bias`));
    for (let t = 0; t < T; t++) {
      const pos = position(t);
      for (let hh = 0; hh < H; hh++) applyRope(q, (t * H + hh) * hd, hd, pos, cfg.ropeTheta, cfg.rotaryDim ?? hd);
      for (let hh = 0; hh < KV; hh++) applyRope(k, (t * KV + hh) * hd, hd, pos, cfg.ropeTheta, cfg.rotaryDim ?? hd);
    }
    const att = causalAttention(q, k, v, T, H, KV, hd, segStart, prefixOf);
    const o = proj(att, T, H * hd, w(`${p}.self_attn.o_proj.weight`), D);
    for (let i = 0; i < T * D; i++) x[i] += o[i];

    // MLP block: x += down(silu(gate(h2)) * up(h2)), or the MoE block (moe-f64.ts) in a sparse layer.
    const h2 = rmsNorm(x, T, D, w(`${p}.post_attention_layernorm.weight`), cfg.rmsNormEps);
    const down = moeLayerFlags(cfg)?.[l]
      ? moeBlock(cfg, linear, w, p, h2, T, opts.routerProbs)
      : swigluMlp(proj, h2, T, D, I, w(`${p}.mlp.gate_proj.weight`), w(`${p}.mlp.up_proj.weight`), w(`${p}.mlp.down_proj.weight`));
    for (let i = 0; i < T * D; i++) x[i] += down[i];
  }

  const final = rmsNorm(x, T, D, w("model.norm.weight"), cfg.rmsNormEps);
  const head = cfg.tieWordEmbeddings ? embed : w("lm_head.weight");
  return linear(final, T, D, head, V);
}

/** log_softmax of one row of logits. */
export function logSoftmaxRow(logits: Float64Array, off: number, V: number): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < V; i++) max = Math.max(max, logits[off + i]);
  let sum = 0;
  for (let i = 0; i < V; i++) sum += Math.exp(logits[off + i] - max);
  const lse = max + Math.log(sum);
  const out = new Float64Array(V);
  for (let i = 0; i < V; i++) out[i] = logits[off + i] - lse;
  return out;
}

/**
 * logprobs[t] = log p(tokens[t] | tokens of its segment (and parent) before t), read from the logits at t - 1
 * (a child's first token: at its parent's last token). NaN at root segment starts, which have no prediction.
 */
export function tokenLogprobs(cfg: ModelConfig, weights: Weights, tokens: Int32Array, segmentStarts: Int32Array, opts: ForwardOptions = {}): Float64Array {
  const V = cfg.vocabSize;
  const T = tokens.length;
  const logits = forwardLogits(cfg, weights, tokens, segmentStarts, opts);
  const { predictor } = layoutOf(T, segmentStarts, opts);
  const out = new Float64Array(T).fill(NaN);
  for (let t = 0; t < T; t++) {
    const from = predictor(t);
    if (from < 0) continue;
    out[t] = logSoftmaxRow(logits, from * V, V)[tokens[t]];
  }
  return out;
}

// ---------------------------------------------------------------------------------------------- losses
// Every per-token array is indexed by the PREDICTED token t (the same index as tokenLogprobs), length T.

export interface LossInputs {
  /** Learner logprobs from tokenLogprobs. */
  logprobs: Float64Array;
  /** 1 where token t counts in the loss; must be 0 at segment starts. */
  lossMask: Uint8Array;
  /** The sum is divided by this (e.g. the number of loss tokens in the whole batch). */
  normalizer: number;
}

export interface PolicyLossInputs extends LossInputs {
  advantages: Float64Array;
  /** Logprobs the inference engine sampled with. */
  samplerLogprobs: Float64Array;
}

function checkInputs(x: LossInputs & Partial<PolicyLossInputs>): void {
  const T = x.logprobs.length;
  for (const key of ["lossMask", "advantages", "samplerLogprobs"] as const) {
    const a = x[key];
    if (a !== undefined && a.length !== T) throw new Error(`${key} has length ${a.length}, logprobs has ${T}`);
  }
  if (!(x.normalizer > 0) || !Number.isFinite(x.normalizer)) throw new Error(`normalizer must be a positive finite number (got ${x.normalizer})`);
  for (let t = 0; t < T; t++) {
    if (x.lossMask[t] && Number.isNaN(x.logprobs[t])) throw new Error(`lossMask is set at token ${t}, which has no logprob (segment start)`);
  }
}

/** SFT cross-entropy: -sum(logp over mask) / normalizer. */
export function sftLoss(x: LossInputs): number {
  checkInputs(x);
  let s = 0;
  for (let t = 0; t < x.logprobs.length; t++) if (x.lossMask[t]) s += x.logprobs[t];
  return -s / x.normalizer;
}

/**
 * The default RL loss (DESIGN.md section 4): ratio = exp(logp - samplerLogp); tokens whose ratio lies outside
 * [maskLow, maskHigh] are dropped; loss = -sum(ratio * A) / normalizer over the kept masked tokens.
 */
export function rlLoss(x: PolicyLossInputs & { maskLow?: number; maskHigh?: number }): number {
  checkInputs(x);
  const lo = x.maskLow ?? 0.125;
  const hi = x.maskHigh ?? 8;
  let s = 0;
  for (let t = 0; t < x.logprobs.length; t++) {
    if (!x.lossMask[t]) continue;
    const ratio = Math.exp(x.logprobs[t] - x.samplerLogprobs[t]);
    if (ratio < lo || ratio > hi) continue;
    s += ratio * x.advantages[t];
  }
  return -s / x.normalizer;
}

/** PPO-clip: -sum(min(ratio * A, clip(ratio, 1 - eps, 1 + epsHigh) * A)) / normalizer; eps 0.2, epsHigh = eps. */
export function ppoClipLoss(x: PolicyLossInputs & { eps?: number; epsHigh?: number }): number {
  checkInputs(x);
  const eps = x.eps ?? 0.2;
  const epsHigh = x.epsHigh ?? eps;
  let s = 0;
  for (let t = 0; t < x.logprobs.length; t++) {
    if (!x.lossMask[t]) continue;
    const ratio = Math.exp(x.logprobs[t] - x.samplerLogprobs[t]);
    const clipped = Math.min(Math.max(ratio, 1 - eps), 1 + epsHigh);
    s += Math.min(ratio * x.advantages[t], clipped * x.advantages[t]);
  }
  return -s / x.normalizer;
}

// ------------------------------------------------------------------------------------ gradient checking

/**
 * Central differences (f(p + h) - f(p - h)) / 2h for params[i] at each index; f must read params.
 * Each entry is restored to its exact original value afterwards.
 */
export function finiteDifferenceGrad(f: () => number, params: Float64Array, indices: number[], h = 1e-5): number[] {
  return indices.map((i) => {
    if (!(i >= 0 && i < params.length)) throw new Error(`finiteDifferenceGrad: index ${i} outside params of length ${params.length}`);
    const orig = params[i];
    params[i] = orig + h;
    const fPlus = f();
    params[i] = orig - h;
    const fMinus = f();
    params[i] = orig;
    return (fPlus - fMinus) / (2 * h);
  });
}
