// Every layer kernel against a float64 reference: forward values, and the analytic (fp32, C) gradient of
// L = sum(dy * f(inputs)) against central differences of the f64 reference, on small random shapes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { kernels, lossSpecSchema, type LossSpec } from "../../kernels/index.js";
import type { ParsedLossSpec } from "../../kernels/loss-spec.js";
import { assertClose, dot64, f64, numericGrad, randF32, randInts } from "./helpers.js";
import * as ref from "./ref-layers.js";

// fp32 analytic vs f64 numeric: errors are ~1e-6 relative; 1e-4 leaves room without hiding real bugs
// (a wrong term shows up at the 1e-1 level).
const RTOL = 1e-4;

test("embedding: forward gathers rows, backward scatter-adds repeated ids", () => {
  const V = 11,
    D = 6;
  const table = randF32(V * D, 1);
  const ids = Int32Array.from([3, 0, 3, 10, 7, 3]);
  const out = kernels.embeddingForward(table, V, D, ids);
  assertClose(out, ref.embedding(f64(table), D, ids), "embedding forward", 0, 0);
  const dy = randF32(ids.length * D, 2);
  const t64 = f64(table);
  const num = numericGrad(() => dot64(dy, ref.embedding(t64, D, ids)), t64);
  assertClose(kernels.embeddingBackward(dy, ids, V, D), num, "embedding d table", RTOL, 1e-7);
});

test("rmsnorm: forward and gradients of x and w", () => {
  const T = 5,
    D = 12,
    eps = 1e-5;
  const x = randF32(T * D, 3, 2),
    w = randF32(D, 4, 1);
  for (let i = 0; i < D; i++) w[i] += 1;
  const { y, rstd } = kernels.rmsnormForward(x, w, T, D, eps);
  const x64 = f64(x),
    w64 = f64(w);
  assertClose(y, ref.rmsNorm(x64, T, D, w64, eps), "rmsnorm forward", 1e-6);
  const dy = randF32(T * D, 5);
  const L = () => dot64(dy, ref.rmsNorm(x64, T, D, w64, eps));
  const { dx, dw } = kernels.rmsnormBackward(dy, x, w, rstd, T, D);
  assertClose(dx, numericGrad(L, x64), "rmsnorm dx", RTOL);
  assertClose(dw, numericGrad(L, w64), "rmsnorm dw", RTOL);
});

test("fused residual + rmsnorm: forward, and gradients of x (= residual), w, with a gradient arriving at r", () => {
  const T = 4,
    D = 10,
    eps = 1e-6;
  const x = randF32(T * D, 6),
    res = randF32(T * D, 7),
    w = randF32(D, 8, 0.5);
  const { r, y, rstd } = kernels.residualRmsnormForward(x, res, w, T, D, eps);
  const x64 = f64(x),
    res64 = f64(res),
    w64 = f64(w);
  const want = ref.residualRmsNorm(x64, res64, T, D, w64, eps);
  assertClose(r, want.r, "residual sum", 1e-7);
  assertClose(y, want.y, "residual rmsnorm forward", 1e-6);
  // L = dy . y + dr . r: the fused backward must add dr (the residual stream's own gradient).
  const dy = randF32(T * D, 9),
    dr = randF32(T * D, 10);
  const L = () => {
    const o = ref.residualRmsNorm(x64, res64, T, D, w64, eps);
    return dot64(dy, o.y) + dot64(dr, o.r);
  };
  const { dx, dw } = kernels.residualRmsnormBackward(dy, dr, r, w, rstd, T, D);
  assertClose(dx, numericGrad(L, x64), "residual rmsnorm dx", RTOL);
  assertClose(dx, numericGrad(L, res64), "residual rmsnorm d residual", RTOL);
  assertClose(dw, numericGrad(L, w64), "residual rmsnorm dw", RTOL);
});

test("matmul y = x W^T + b: forward and gradients of x, W, b", () => {
  const N = 7,
    inD = 13,
    outD = 9;
  const x = randF32(N * inD, 11),
    W = randF32(outD * inD, 12),
    b = randF32(outD, 13);
  const x64 = f64(x),
    W64 = f64(W),
    b64 = f64(b);
  assertClose(kernels.matmulForward(x, W, b, N, inD, outD), ref.linear(x64, N, inD, W64, outD, b64), "matmul forward", 1e-6);
  assertClose(kernels.matmulForward(x, W, null, N, inD, outD), ref.linear(x64, N, inD, W64, outD), "matmul forward, no bias", 1e-6);
  const dy = randF32(N * outD, 14);
  const L = () => dot64(dy, ref.linear(x64, N, inD, W64, outD, b64));
  const g = kernels.matmulBackward(dy, x, W, N, inD, outD);
  assertClose(g.dx, numericGrad(L, x64), "matmul dx", RTOL);
  assertClose(g.dW, numericGrad(L, W64), "matmul dW", RTOL);
  assertClose(g.db, numericGrad(L, b64), "matmul db", RTOL);
});

test("rope (HF rotate-half): forward matches the reference and the backward is its exact adjoint", () => {
  const T = 6,
    H = 3,
    hd = 8,
    theta = 10000;
  const x = randF32(T * H * hd, 15);
  const pos = Int32Array.from([0, 1, 2, 9, 0, 31]);
  const x64 = f64(x);
  assertClose(kernels.ropeForward(x, T, H, hd, pos, theta), ref.rope(x64, T, H, hd, pos, theta), "rope forward", 1e-6);
  const dy = randF32(T * H * hd, 16);
  const num = numericGrad(() => dot64(dy, ref.rope(x64, T, H, hd, pos, theta)), x64);
  assertClose(kernels.ropeBackward(dy, T, H, hd, pos, theta), num, "rope dx", RTOL);
  // Position 0 is the identity.
  const one = kernels.ropeForward(x.subarray(0, H * hd), 1, H, hd, Int32Array.of(0), theta);
  assertClose(one, x.subarray(0, H * hd), "rope at position 0", 0, 0);
});

test("attention: causal GQA within two packed segments, forward and gradients of q, k, v", () => {
  const T = 9,
    H = 4,
    KV = 2,
    hd = 6;
  const segmentStarts = Int32Array.from([0, 5]);
  const dims = { T, heads: H, kvHeads: KV, headDim: hd, segmentStarts };
  const q = randF32(T * H * hd, 17, 1.5),
    k = randF32(T * KV * hd, 18, 1.5),
    v = randF32(T * KV * hd, 19);
  const q64 = f64(q),
    k64 = f64(k),
    v64 = f64(v);
  const segStart = ref.segmentStartOf(T, segmentStarts);
  const { out, lse } = kernels.attentionForward(q, k, v, dims);
  assertClose(out, ref.causalAttention(q64, k64, v64, T, H, KV, hd, segStart), "attention forward", 1e-5);
  const dy = randF32(T * H * hd, 20);
  const L = () => dot64(dy, ref.causalAttention(q64, k64, v64, T, H, KV, hd, segStart));
  const g = kernels.attentionBackward(dy, q, k, v, out, lse, dims);
  assertClose(g.dq, numericGrad(L, q64), "attention dq", RTOL);
  assertClose(g.dk, numericGrad(L, k64), "attention dk", RTOL);
  assertClose(g.dv, numericGrad(L, v64), "attention dv", RTOL);
  // No attention across the boundary: the second segment's output ignores the first segment's keys.
  const k2 = Float32Array.from(k);
  for (let i = 0; i < 5 * KV * hd; i++) k2[i] += 3;
  const out2 = kernels.attentionForward(q, k2, v, dims).out;
  assertClose(out2.subarray(5 * H * hd), out.subarray(5 * H * hd), "segment isolation", 0, 0);
});

test("swiglu: forward and gradients of gate and up", () => {
  const n = 40;
  const gate = randF32(n, 21, 4),
    up = randF32(n, 22, 2);
  const g64 = f64(gate),
    u64 = f64(up);
  assertClose(kernels.swigluForward(gate, up), ref.swiglu(g64, u64), "swiglu forward", 1e-6);
  const dh = randF32(n, 23);
  const L = () => dot64(dh, ref.swiglu(g64, u64));
  const { dgate, dup } = kernels.swigluBackward(dh, gate, up);
  assertClose(dgate, numericGrad(L, g64), "swiglu dgate", RTOL);
  assertClose(dup, numericGrad(L, u64), "swiglu dup", RTOL);
});

test("grad norm and AdamW match their definitions", () => {
  const n = 1000;
  const g = randF32(n, 24);
  let ss = 0;
  for (const v of g) ss += v * v;
  assert.ok(Math.abs(kernels.gradNorm(g) - Math.sqrt(ss)) < 1e-9 * Math.sqrt(ss));
  const p = randF32(n, 25),
    m = randF32(n, 26, 0.1),
    v = randF32(n, 27, 0.1).map(Math.abs);
  const p0 = Float64Array.from(p),
    m0 = Float64Array.from(m),
    v0 = Float64Array.from(v);
  const o = { lr: 0.01, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, step: 3, gradScale: 0.5 };
  kernels.adamw(p, g, m, v, o);
  const want = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const gi = g[i] * o.gradScale;
    const mi = o.beta1 * m0[i] + (1 - o.beta1) * gi;
    const vi = o.beta2 * v0[i] + (1 - o.beta2) * gi * gi;
    const denom = Math.sqrt(vi) / Math.sqrt(1 - o.beta2 ** o.step) + o.eps;
    want[i] = p0[i] * (1 - o.lr * o.weightDecay) - (o.lr / (1 - o.beta1 ** o.step)) * (mi / denom);
  }
  assertClose(p, want, "adamw params", 1e-6);
});

// ------------------------------------------------------------------------------------------ fused loss

// Rows with chosen log-ratios d = logp - samplerLogp, away from every masking/clipping boundary so central
// differences never straddle one: |d| = 3 is masked (ratio outside [1/8, 8]); 0.3 / -0.4 clip under ppo.
const D_ROWS = [0, 0.5, -0.5, 3, -3, 0.1, -0.1, 0.3, -0.4, 0.2];
const ADV = [1, -1, 0.5, 2, -2, -0.7, 1.3, 1.5, -1.2, 0.9];

function lossCase(V: number, seed: number) {
  const N = D_ROWS.length;
  const logits = randF32(N * V, seed, 3);
  const targets = randInts(N, seed + 1, V);
  const mask = Uint8Array.from({ length: N }, (_, r) => (r === 2 ? 0 : 1));
  const l64 = f64(logits);
  const zeros = new Float64Array(N);
  const logp = ref.lossFromLogits(l64, N, V, targets, new Uint8Array(N).fill(1), zeros, zeros, { name: "sft", normalizer: 1 }).logprobs;
  const slp = Float32Array.from(D_ROWS, (d, r) => logp[r] - d);
  const adv = Float32Array.from(ADV);
  return { N, V, logits, l64, targets, mask, slp, adv };
}

type LossCase = ReturnType<typeof lossCase>;

/**
 * dlogits row by row (the loss is a sum over rows) against central differences of the f64 reference. Big vocab:
 * the target, `edges` (e.g. both sides of the 1024-wide chunk boundaries) and `random` sampled columns (the
 * full row would cost V^2 reference evaluations).
 */
function assertRowGrads(
  c: LossCase,
  dl: Float32Array,
  refSpec: ParsedLossSpec,
  normalizer: number,
  o: { edges: number[]; random: number; seed: number; what: string },
) {
  const V = c.V;
  const adv64 = f64(c.adv),
    slp64 = f64(c.slp);
  for (let row = 0; row < c.N; row++) {
    const rowLogits = c.l64.subarray(row * V, (row + 1) * V);
    const L = () =>
      ref.lossFromLogits(
        rowLogits,
        1,
        V,
        c.targets.subarray(row, row + 1),
        Uint8Array.of(c.mask[row]!),
        adv64.subarray(row, row + 1),
        slp64.subarray(row, row + 1),
        {
          ...refSpec,
          normalizer,
        },
      ).loss;
    const cols = V <= 64 ? undefined : [...new Set([c.targets[row]!, ...o.edges, V - 1, ...randInts(o.random, o.seed + row, V)])].filter((j) => j < V);
    const num = numericGrad(L, rowLogits, 1e-5, cols);
    const got = cols ? Float32Array.from(cols, (j) => dl[row * V + j]!) : dl.subarray(row * V, (row + 1) * V);
    assertClose(got, num, `${o.what} row ${row}`, RTOL, 1e-8);
  }
}

// The kernels and the reference both get the schema's defaults (the reference has none of its own).
const LOSSES: LossSpec[] = [
  { name: "sft" },
  { name: "rl" },
  { name: "rl", klCoef: 0.3 },
  { name: "ppo_clip" },
  { name: "ppo_clip", clipEps: 0.1, clipEpsHigh: 0.25, maskHigh: 8, klCoef: 0.1 },
];

for (const V of [37, 2500]) {
  for (const spec of LOSSES) {
    const refSpec = lossSpecSchema.parse(spec);
    test(`fused loss ${JSON.stringify(spec)}, vocab ${V}: value, stats and dlogits vs the f64 reference`, () => {
      const c = lossCase(V, 100 + V);
      const normalizer = 7;
      const r = kernels.lossForwardBackward({
        logits: c.logits,
        N: c.N,
        vocab: V,
        targets: c.targets,
        mask: c.mask,
        advantages: c.adv,
        samplerLogprobs: c.slp,
        loss: spec,
        normalizer,
      });
      const adv64 = f64(c.adv),
        slp64 = f64(c.slp);
      const want = ref.lossFromLogits(c.l64, c.N, V, c.targets, c.mask, adv64, slp64, { ...refSpec, normalizer });
      assert.ok(Math.abs(r.stats.loss - want.loss) <= 1e-5 * Math.max(1, Math.abs(want.loss)), `loss ${r.stats.loss} vs ${want.loss}`);
      assert.equal(r.stats.lossTokens, want.lossTokens);
      assert.equal(r.stats.maskedTokens, want.maskedTokens);
      if (spec.name === "rl") assert.equal(r.stats.maskedTokens, 2, "the |d| = 3 rows are masked");
      assert.ok(Math.abs(r.stats.entropySum - want.entropySum) < 1e-4 * want.entropySum, `entropy ${r.stats.entropySum} vs ${want.entropySum}`);
      assert.ok(Math.abs(r.stats.logpSum - want.logpSum) < 1e-5 * Math.abs(want.logpSum));
      assert.ok(Math.abs(r.stats.mismatchKlSum - want.mismatchKlSum) < 1e-4 * Math.max(1, want.mismatchKlSum));
      assertClose(r.tokenLogprobs, want.logprobs, "token logprobs", 1e-6, 1e-6);
      const dl = r.dlogits!;
      assertRowGrads(c, dl, refSpec, normalizer, { edges: [0, 1023, 1024, 2047, 2048], random: 40, seed: 900, what: "dlogits" });
      // The masked rows (ratio outside [1/8, 8]) have exactly zero gradient under rl.
      if (spec.name === "rl")
        for (const row of [3, 4])
          assert.ok(
            dl.subarray(row * V, (row + 1) * V).every((x) => x === 0),
            `row ${row} masked`,
          );
    });
  }
}

test("rl with maskLow 0 and maskHigh Infinity masks nothing", () => {
  const c = lossCase(50, 9);
  const r = kernels.lossForwardBackward({
    logits: c.logits,
    N: c.N,
    vocab: c.V,
    targets: c.targets,
    mask: c.mask,
    advantages: c.adv,
    samplerLogprobs: c.slp,
    loss: { name: "rl", maskLow: 0, maskHigh: Infinity },
    normalizer: 1,
  });
  assert.equal(r.stats.maskedTokens, 0);
});

test("fused loss without a gradient buffer returns the same stats", () => {
  const c = lossCase(300, 7);
  const a = {
    logits: c.logits,
    N: c.N,
    vocab: c.V,
    targets: c.targets,
    mask: c.mask,
    advantages: c.adv,
    samplerLogprobs: c.slp,
    loss: { name: "rl" as const },
    normalizer: 3,
  };
  const withGrad = kernels.lossForwardBackward(a);
  const noGrad = kernels.lossForwardBackward({ ...a, withGrad: false });
  assert.deepEqual(noGrad.stats, withGrad.stats);
  assert.equal(noGrad.dlogits, undefined);
});

// dppo and ipo bound how far the token's probability moved (p - q), not the ratio. Their thresholds are set
// between this case's rows, so some rows are masked and some not, and none sits where a central difference
// could cross a bound; masked rows keep the d^2 term's gradient (checked numerically like the rest).
for (const V of [37, 2500]) {
  for (const name of ["dppo", "ipo"] as const) {
    test(`fused loss ${name}, vocab ${V}: probability trust region, value, masked count and dlogits vs the f64 reference`, () => {
      const c = lossCase(V, 300 + V);
      const adv64 = f64(c.adv),
        slp64 = f64(c.slp);
      const zeros = new Float64Array(c.N);
      const logp = ref.lossFromLogits(c.l64, c.N, V, c.targets, new Uint8Array(c.N).fill(1), zeros, zeros, { name: "sft", normalizer: 1 }).logprobs;
      const moved = Array.from({ length: c.N }, (_, r) => {
        const diff = Math.exp(logp[r]!) - Math.exp(slp64[r]!);
        return name === "ipo" ? Math.abs(diff) : c.adv[r]! > 0 ? diff : -diff;
      }).filter((_, r) => c.mask[r]);
      const sorted = [...moved].sort((a, b) => a - b);
      // The widest gap between two rows that both moved up (a bound is >= 0): rows on both sides of it, and
      // far from it next to what a central difference moves a probability (~1e-9 here).
      let best = { gap: -1, at: 0 };
      for (let i = 0; i < sorted.length - 1; i++) {
        const gap = sorted[i + 1]! - sorted[i]!;
        if (sorted[i]! > 1e-8 && gap > best.gap) best = { gap, at: (sorted[i]! + sorted[i + 1]!) / 2 };
      }
      assert.ok(best.gap > 0, `rows to put a bound between: ${sorted}`);
      const spec: LossSpec = name === "dppo" ? { name, probDiffLow: best.at, probDiffHigh: best.at, klTau: 0.05 } : { name, threshold: best.at, klTau: 0.05 };
      const refSpec = lossSpecSchema.parse(spec);
      const normalizer = 5;
      const r = kernels.lossForwardBackward({
        logits: c.logits,
        N: c.N,
        vocab: V,
        targets: c.targets,
        mask: c.mask,
        advantages: c.adv,
        samplerLogprobs: c.slp,
        loss: spec,
        normalizer,
      });
      const want = ref.lossFromLogits(c.l64, c.N, V, c.targets, c.mask, adv64, slp64, { ...refSpec, normalizer });
      assert.ok(want.maskedTokens > 0 && want.maskedTokens < want.lossTokens, `the bound splits the rows: ${want.maskedTokens} of ${want.lossTokens} masked`);
      assert.equal(r.stats.maskedTokens, want.maskedTokens);
      assert.ok(Math.abs(r.stats.loss - want.loss) <= 1e-5 * Math.max(1, Math.abs(want.loss)), `loss ${r.stats.loss} vs ${want.loss}`);
      assertRowGrads(c, r.dlogits!, refSpec, normalizer, { edges: [0, 1023, 1024], random: 30, seed: 700, what: `${name} dlogits` });
    });
  }
}

test("dppo and ipo: the schema's defaults are PRIME-RL's, and bounds below 0 are refused", () => {
  assert.deepEqual(lossSpecSchema.parse({ name: "dppo" }), { name: "dppo", probDiffLow: 0.2, probDiffHigh: 0.2, klTau: 1e-3 });
  assert.deepEqual(lossSpecSchema.parse({ name: "ipo" }), { name: "ipo", threshold: 0.1, klTau: 1e-3 });
  assert.throws(() => lossSpecSchema.parse({ name: "ipo", threshold: -0.1 }));
  assert.throws(() => lossSpecSchema.parse({ name: "dppo", maskLow: 0.1 }), "the ratio mask is not a dppo parameter");
});
