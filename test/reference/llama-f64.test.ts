import { test } from "node:test";
import assert from "node:assert/strict";
import type { ModelConfig } from "../../kernels/model-config.js";
import {
  applyRope,
  finiteDifferenceGrad,
  forwardLogits,
  ppoClipLoss,
  randomWeights,
  rlLoss,
  rmsNorm,
  sftLoss,
  tokenLogprobs,
  weightShapes,
  type Weights,
} from "./llama-f64.js";

const cfg: ModelConfig = {
  vocabSize: 13,
  hiddenSize: 16,
  intermediateSize: 24,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  rmsNormEps: 1e-5,
  ropeTheta: 10000,
  tieWordEmbeddings: false,
  maxPositionEmbeddings: 64,
  attentionBias: true,
};
const V = cfg.vocabSize;

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

const segments = [
  [3, 1, 4, 1, 5],
  [9, 2, 6],
  [5, 3, 5, 8],
];
const packed = Int32Array.from(segments.flat());
const starts = Int32Array.of(0, 5, 8);

test("weightShapes follows HF names, biases and tying", () => {
  const s = weightShapes(cfg);
  assert.deepEqual(s.get("model.layers.1.self_attn.q_proj.weight"), [16, 16]);
  assert.deepEqual(s.get("model.layers.1.self_attn.k_proj.weight"), [8, 16]);
  assert.deepEqual(s.get("model.layers.0.self_attn.v_proj.bias"), [8]);
  assert.deepEqual(s.get("model.layers.0.mlp.down_proj.weight"), [16, 24]);
  assert.deepEqual(s.get("lm_head.weight"), [13, 16]);
  const tied = weightShapes({ ...cfg, tieWordEmbeddings: true, attentionBias: false });
  assert.equal(tied.has("lm_head.weight"), false);
  assert.equal(
    [...tied.keys()].some((k) => k.endsWith(".bias")),
    false,
  );
  assert.equal(s.size, 1 + 2 * 12 + 1 + 1);
});

test("randomWeights is deterministic per seed", () => {
  const a = randomWeights(cfg, 7);
  const b = randomWeights(cfg, 7);
  const c = randomWeights(cfg, 8);
  for (const [name, w] of a) assert.deepEqual(b.get(name), w, name);
  assert.ok(maxAbsDiff(a.get("model.embed_tokens.weight")!, c.get("model.embed_tokens.weight")!) > 0.1);
});

test("packed segments give the same logits as separate sequences", () => {
  const w = randomWeights(cfg, 1);
  const all = forwardLogits(cfg, w, packed, starts);
  let off = 0;
  for (const seg of segments) {
    const alone = forwardLogits(cfg, w, Int32Array.from(seg), Int32Array.of(0));
    assert.ok(maxAbsDiff(alone, all.subarray(off * V, (off + seg.length) * V)) < 1e-12);
    off += seg.length;
  }
  // Sanity: the segment boundary matters, i.e. treating everything as one sequence changes later logits.
  const joined = forwardLogits(cfg, w, packed, Int32Array.of(0));
  assert.ok(maxAbsDiff(joined.subarray(5 * V), all.subarray(5 * V)) > 1e-3);
  const lp = tokenLogprobs(cfg, w, packed, starts);
  for (let t = 0; t < packed.length; t++) assert.equal(Number.isNaN(lp[t]), [0, 5, 8].includes(t), `t=${t}`);
  for (let t = 0; t < packed.length; t++) if (!Number.isNaN(lp[t])) assert.ok(lp[t] < 0);
});

test("attention is causal: a later token never changes earlier logits", () => {
  const w = randomWeights(cfg, 2);
  const tokens = Int32Array.of(1, 2, 3, 4, 5, 6, 7);
  const changed = Int32Array.from(tokens);
  changed[4] = 11;
  const a = forwardLogits(cfg, w, tokens, Int32Array.of(0));
  const b = forwardLogits(cfg, w, changed, Int32Array.of(0));
  assert.equal(maxAbsDiff(a.subarray(0, 4 * V), b.subarray(0, 4 * V)), 0);
  for (let t = 4; t < 7; t++) assert.ok(maxAbsDiff(a.subarray(t * V, (t + 1) * V), b.subarray(t * V, (t + 1) * V)) > 1e-3, `t=${t}`);
});

test("RoPE: identity at position 0, rotate-half pairing, relative positions", () => {
  const x = Float64Array.from([0.3, -1.2, 2.5, 0.7, 1.1, -0.4, 0.9, 2.0]);
  const y = Float64Array.from(x);
  applyRope(y, 0, 8, 0, 10000);
  assert.deepEqual(y, x);

  // HF pairs element i with i + hd/2 (not 2i with 2i+1); pair 0 rotates by exactly `position` radians.
  const e0 = Float64Array.of(1, 0, 0, 0);
  applyRope(e0, 0, 4, 1, 10000);
  assert.ok(maxAbsDiff(e0, [Math.cos(1), 0, Math.sin(1), 0]) < 1e-15);
  // Pair 1 of hd=4 uses inv_freq = theta^(-2/4) = 0.01 for theta 10000.
  const e1 = Float64Array.of(0, 0, 0, 1);
  applyRope(e1, 0, 4, 3, 10000);
  assert.ok(maxAbsDiff(e1, [0, -Math.sin(0.03), 0, Math.cos(0.03)]) < 1e-15);

  // Rotation: norms are kept, and q.k depends only on the position difference.
  const q = Float64Array.from(x);
  const k = Float64Array.from([1, 2, -0.5, 0.25, -1, 0.5, 1.5, -2]);
  const dotAt = (pq: number, pk: number) => {
    const a = Float64Array.from(q);
    const b = Float64Array.from(k);
    applyRope(a, 0, 8, pq, 500);
    applyRope(b, 0, 8, pk, 500);
    return { dot: a.reduce((s, v, i) => s + v * b[i], 0), norm: Math.hypot(...a) };
  };
  assert.ok(Math.abs(dotAt(7, 2).dot - dotAt(12, 7).dot) < 1e-12);
  assert.ok(Math.abs(dotAt(7, 2).dot - dotAt(7, 3).dot) > 1e-3);
  assert.ok(Math.abs(dotAt(9, 0).norm - Math.hypot(...x)) < 1e-12);
});

test("RMSNorm matches the formula", () => {
  const y = rmsNorm(Float64Array.of(3, 4, 0, 0, 2, 2), 2, 3, Float64Array.of(1, 2, 0.5), 0);
  const r0 = Math.sqrt(25 / 3);
  const r1 = Math.sqrt(8 / 3);
  assert.ok(maxAbsDiff(y, [3 / r0, 8 / r0, 0, 0, 4 / r1, 1 / r1]) < 1e-15);
});

test("a single token attends only to itself: q/k projections cannot change its logits", () => {
  const w = randomWeights(cfg, 3);
  const a = forwardLogits(cfg, w, Int32Array.of(4), Int32Array.of(0));
  const w2: Weights = new Map(w);
  w2.set("model.layers.0.self_attn.q_proj.weight", randomWeights(cfg, 99).get("model.layers.0.self_attn.q_proj.weight")!);
  w2.set("model.layers.1.self_attn.k_proj.weight", randomWeights(cfg, 99).get("model.layers.1.self_attn.k_proj.weight")!);
  assert.ok(maxAbsDiff(a, forwardLogits(cfg, w2, Int32Array.of(4), Int32Array.of(0))) < 1e-13);
  // ... but v_proj does.
  w2.set("model.layers.0.self_attn.v_proj.weight", randomWeights(cfg, 99).get("model.layers.0.self_attn.v_proj.weight")!);
  assert.ok(maxAbsDiff(a, forwardLogits(cfg, w2, Int32Array.of(4), Int32Array.of(0))) > 1e-3);
});

test("GQA: query head h reads kv head floor(h / (H/KV)), same as repeating kv heads", () => {
  const w = randomWeights(cfg, 4);
  const full: ModelConfig = { ...cfg, numKvHeads: cfg.numHeads };
  const hd = cfg.hiddenSize / cfg.numHeads;
  const group = cfg.numHeads / cfg.numKvHeads;
  const wFull: Weights = new Map(w);
  for (let l = 0; l < cfg.numLayers; l++) {
    for (const proj of ["k_proj", "v_proj"]) {
      for (const kind of ["weight", "bias"]) {
        const name = `model.layers.${l}.self_attn.${proj}.${kind}`;
        const src = w.get(name)!;
        const rowLen = kind === "weight" ? cfg.hiddenSize : 1;
        const dst = new Float64Array(full.numKvHeads * hd * rowLen);
        for (let h = 0; h < full.numKvHeads; h++) {
          const from = Math.floor(h / group);
          dst.set(src.subarray(from * hd * rowLen, (from + 1) * hd * rowLen), h * hd * rowLen);
        }
        wFull.set(name, dst);
      }
    }
  }
  assert.ok(maxAbsDiff(forwardLogits(cfg, w, packed, starts), forwardLogits(full, wFull, packed, starts)) < 1e-12);
});

test("tied embeddings equal an untied lm_head that copies the embedding", () => {
  const tiedCfg: ModelConfig = { ...cfg, tieWordEmbeddings: true };
  const w = randomWeights(cfg, 5);
  const untied: Weights = new Map(w);
  untied.set("lm_head.weight", Float64Array.from(w.get("model.embed_tokens.weight")!));
  const tied: Weights = new Map(w);
  tied.delete("lm_head.weight");
  assert.ok(maxAbsDiff(forwardLogits(tiedCfg, tied, packed, starts), forwardLogits(cfg, untied, packed, starts)) < 1e-14);
});

test("bad inputs throw clear errors", () => {
  const w = randomWeights(cfg, 6);
  assert.throws(() => forwardLogits(cfg, w, Int32Array.of(1, 13), Int32Array.of(0)), /token 13 at position 1 is outside the vocab/);
  assert.throws(() => forwardLogits(cfg, w, Int32Array.of(1, 2), Int32Array.of(1)), /segmentStarts must begin with 0/);
  assert.throws(() => forwardLogits(cfg, w, Int32Array.of(1, 2), Int32Array.of(0, 2)), /not below the token count/);
  assert.throws(() => forwardLogits(cfg, w, Int32Array.of(1, 2, 3), Int32Array.of(0, 2, 1)), /strictly increasing/);
  const missing = new Map(w);
  missing.delete("model.layers.1.mlp.up_proj.weight");
  assert.throws(() => forwardLogits(cfg, missing, Int32Array.of(1), Int32Array.of(0)), /missing weight "model.layers.1.mlp.up_proj.weight"/);
  const noBias = { ...cfg, attentionBias: false };
  assert.doesNotThrow(() => forwardLogits(noBias, w, Int32Array.of(1), Int32Array.of(0)));
});

test("finite differences recover the gradient of a quadratic and restore params", () => {
  const p = Float64Array.of(0.5, -1.5, 2, 3);
  const f = () => 3 * p[0] ** 2 + p[0] * p[1] - 2 * p[2] ** 2 + 7 * p[3];
  const expected = [6 * p[0] + p[1], p[0], -4 * p[2], 7];
  const before = Float64Array.from(p);
  const g = finiteDifferenceGrad(f, p, [0, 1, 2, 3]);
  assert.ok(maxAbsDiff(g, expected) < 1e-8, `${g} vs ${expected}`);
  assert.deepEqual(p, before);
  assert.throws(() => finiteDifferenceGrad(f, p, [4]), /index 4 outside/);
});

test("finite differences through the model are stable across step sizes", () => {
  const w = randomWeights(cfg, 8);
  const lossMask = Uint8Array.from(packed, (_, t) => (starts.includes(t) ? 0 : 1));
  const loss = () => sftLoss({ logprobs: tokenLogprobs(cfg, w, packed, starts), lossMask, normalizer: 9 });
  for (const name of ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.input_layernorm.weight", "model.layers.0.self_attn.k_proj.bias"]) {
    const g4 = finiteDifferenceGrad(loss, w.get(name)!, [0, 5], 1e-4);
    const g5 = finiteDifferenceGrad(loss, w.get(name)!, [0, 5], 1e-5);
    for (let i = 0; i < 2; i++) {
      assert.ok(Math.abs(g4[i]) > 1e-6, `${name}: gradient should not vanish`);
      assert.ok(Math.abs(g4[i] - g5[i]) < 1e-7 * Math.max(1, Math.abs(g4[i])), `${name}: ${g4[i]} vs ${g5[i]}`);
    }
  }
});

test("losses: SFT, RL ratio masking, PPO clip", () => {
  const logprobs = Float64Array.of(NaN, -1, -2, -0.5, -3, -1.5);
  const lossMask = Uint8Array.of(0, 1, 1, 1, 1, 0);
  // ratio = exp(logp - sampler): 1, 10 (dropped), 0.1 (dropped), 2, masked out.
  const samplerLogprobs = Float64Array.of(NaN, -1, -2 - Math.log(10), -0.5 + Math.log(10), -3 - Math.log(2), -1.5);
  const advantages = Float64Array.of(0, 0.5, 1, -2, 1.5, 100);
  const base = { logprobs, lossMask, samplerLogprobs, advantages, normalizer: 4 };

  assert.ok(Math.abs(sftLoss(base) - (1 + 2 + 0.5 + 3) / 4) < 1e-15);
  assert.ok(Math.abs(rlLoss(base) - -(1 * 0.5 + 2 * 1.5) / 4) < 1e-12);
  // A wider window keeps the 10x and 0.1x tokens.
  assert.ok(Math.abs(rlLoss({ ...base, maskLow: 0.05, maskHigh: 20 }) - -(0.5 + 10 * 1 + 0.1 * -2 + 2 * 1.5) / 4) < 1e-12);
  // PPO: min(r*A, clip(r, 0.8, 1.2)*A): t1 0.5; t2 min(10, 1.2) = 1.2; t3 min(-0.2, -1.6) = -1.6; t4 min(3, 1.8) = 1.8.
  assert.ok(Math.abs(ppoClipLoss(base) - -(0.5 + 1.2 - 1.6 + 1.8) / 4) < 1e-12);

  // d rlLoss / d logp_t = -ratio * A / N on kept tokens, 0 on dropped ones.
  const lp = Float64Array.from(logprobs);
  const g = finiteDifferenceGrad(() => rlLoss({ ...base, logprobs: lp }), lp, [1, 2, 3, 4]);
  assert.ok(maxAbsDiff(g, [-0.5 / 4, 0, 0, (-2 * 1.5) / 4]) < 1e-8);

  assert.throws(() => sftLoss({ ...base, lossMask: Uint8Array.of(1, 1, 1, 1, 1, 0) }), /lossMask is set at token 0/);
  assert.throws(() => rlLoss({ ...base, advantages: Float64Array.of(1) }), /advantages has length 1/);
  assert.throws(() => sftLoss({ ...base, normalizer: 0 }), /normalizer must be a positive/);
});
