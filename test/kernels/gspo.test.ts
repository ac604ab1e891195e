// GSPO's two passes against its definition: the sequence-level ratio s_i = exp(mean d) clipped per sequence,
// loss = -mean_i min(s_i A_i, clip(s_i) A_i). The first pass reads the learner's logprobs, the second trains
// with the rl kernel at ratio 1; its dlogits must equal central differences of the f64 loss, including a
// sequence whose clipped term wins (gradient exactly 0 there) and one with a negative advantage. Split by micro-batch
// (what learner ranks compute, each for its own), the coefficients and sums are the whole step's, given its counts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { kernels } from "../../kernels/index.js";
import { GSPO_SECOND_PASS_LOSS, gspoMicroBatch, gspoSequenceCount, type GspoSums, type GspoSpec } from "../../kernels/gspo.js";
import type { PackedMicroBatch } from "../../kernels/packing.js";
import { assertClose, f64, numericGrad, randF32, randInts } from "./helpers.js";

const V = 41;
// Three sequences of 4 rows; per sequence the mean log-ratio d and the advantage: inside the clip range,
// clipped with A > 0 (s = e^0.4 > 1.2: the clipped term is smaller), inside with A < 0.
const SEQS = [
  { d: [0.02, 0.08, 0.05, 0.05], A: 1.5 },
  { d: [0.4, 0.3, 0.5, 0.4], A: 0.8 },
  { d: [-0.05, 0.0, -0.1, -0.05], A: -1.1 },
];
const SPEC = { clipEps: 0.2, clipEpsHigh: 0.2 };

/** The whole step's coefficients and figures, as one process computes them (trainOnSamples). */
function wholeStep(mbs: PackedMicroBatch[], logp: Float32Array[], spec: GspoSpec, normalizer: number) {
  const sequences = gspoSequenceCount(mbs);
  const sums: GspoSums = { loss: 0, clippedTokens: 0, mismatchKlSum: 0 };
  const coefficients = mbs.map((mb, m) => gspoMicroBatch(mb, logp[m]!, spec, normalizer, sequences, sums));
  return { ...sums, sequences, coefficients };
}

function logSoftmaxAt(logits: Float64Array, row: number, target: number): number {
  let max = -Infinity;
  for (let j = 0; j < V; j++) max = Math.max(max, logits[row * V + j]!);
  let sum = 0;
  for (let j = 0; j < V; j++) sum += Math.exp(logits[row * V + j]! - max);
  return logits[row * V + target]! - max - Math.log(sum);
}

test("gspo: loss and dlogits of the two passes equal the sequence-level definition (central differences)", () => {
  const N = SEQS.length * 4;
  const logits = randF32(N * V, 51, 2);
  const l64 = f64(logits);
  const targets = randInts(N, 52, V);
  const mask = new Uint8Array(N).fill(1);
  const logp0 = Array.from({ length: N }, (_, r) => logSoftmaxAt(l64, r, targets[r]!));
  const slp = Float32Array.from({ length: N }, (_, r) => logp0[r]! - SEQS[Math.floor(r / 4)]!.d[r % 4]!);
  const adv = Float32Array.from({ length: N }, (_, r) => SEQS[Math.floor(r / 4)]!.A);
  const normalizer = N;

  // The reference: the GSPO loss of the logits, in f64.
  const reference = (z: Float64Array): number => {
    let loss = 0;
    SEQS.forEach((seq, i) => {
      let sum = 0;
      for (let k = 0; k < 4; k++) sum += logSoftmaxAt(z, i * 4 + k, targets[i * 4 + k]!) - slp[i * 4 + k]!;
      const s = Math.exp(sum / 4);
      const c = Math.min(Math.max(s, 1 - SPEC.clipEps), 1 + SPEC.clipEpsHigh);
      loss -= Math.min(s * seq.A, c * seq.A) / SEQS.length;
    });
    return loss;
  };

  // Pass 1: the learner's logprobs; then the coefficients; pass 2: the rl kernel at ratio 1.
  const first = kernels.lossForwardBackward({ logits, N, vocab: V, targets, mask, loss: { name: "sft" }, normalizer, withGrad: false });
  const mb: PackedMicroBatch = { tokens: new Int32Array(N), segmentStarts: Int32Array.of(0, 4, 8), lossMask: mask, advantages: adv, samplerLogprobs: slp };
  const g = wholeStep([mb], [first.tokenLogprobs], SPEC, normalizer);
  assert.equal(g.sequences, 3);
  assert.equal(g.clippedTokens, 4, "the second sequence's clipped term wins");
  assert.ok(Math.abs(g.loss - reference(l64)) < 1e-5, `loss ${g.loss} vs ${reference(l64)}`);
  const second = kernels.lossForwardBackward({
    logits,
    N,
    vocab: V,
    targets,
    mask,
    advantages: g.coefficients[0]!,
    samplerLogprobs: first.tokenLogprobs,
    loss: GSPO_SECOND_PASS_LOSS,
    normalizer,
  });
  const num = numericGrad(() => reference(l64), l64, 1e-5);
  assertClose(second.dlogits!, num, "gspo dlogits", 1e-3, 1e-7);
  // The clipped sequence gets no gradient at all; the others do (the control that the check sees gradients).
  assert.ok(second.dlogits!.subarray(4 * V, 8 * V).every((x) => x === 0));
  assert.ok(second.dlogits!.subarray(0, 4 * V).some((x) => Math.abs(x) > 1e-4));
  assert.ok(second.dlogits!.subarray(8 * V, 12 * V).some((x) => Math.abs(x) > 1e-4));
});

test("gspo trains a model step end to end: its gradient equals the rl loss's on on-policy samples with the same per-sequence weight", async () => {
  const { PolicyModel } = await import("../../kernels/index.js");
  const { runTrainStep } = await import("../../kernels/train-step.js");
  const { tinyConfig } = await import("./helpers.js");
  const cfg = tinyConfig({ hiddenSize: 32, intermediateSize: 64, numHeads: 4, numKvHeads: 2, vocabSize: 37, tieWordEmbeddings: false });
  const samples = [0, 1, 2, 3].map((i) => {
    const completion = randInts(6, 70 + i, 37);
    return {
      promptIds: randInts(4, 60 + i, 37),
      completionIds: completion,
      completionMask: new Uint8Array(6).fill(1),
      samplerLogprobs: new Float32Array(6),
      advantage: i % 2 ? 1 : -1,
    };
  });
  // On-policy: the sampler's logprobs are the model's own, so s_i = 1 and nothing is clipped.
  const probe = PolicyModel.create(cfg, { seed: 3, threads: 1 });
  const { packSamples } = await import("../../kernels/packing.js");
  const packed = packSamples(samples, 4096, cfg.maxPositionEmbeddings);
  const lp = (await probe.accumulate(packed.microBatches[0]!, { name: "sft" }, 1, { tokenLogprobs: true })).tokenLogprobs!;
  probe.dispose();
  let offset = 0;
  for (const s of samples) {
    offset += s.promptIds.length;
    s.samplerLogprobs = Float32Array.from({ length: 6 }, (_, k) => lp[offset + k]!); // indexed by the predicted token
    offset += 6;
  }
  const a = PolicyModel.create(cfg, { seed: 3, threads: 1 });
  const r = await runTrainStep(
    a,
    samples,
    { name: "gspo", clipEps: 3e-4, clipEpsHigh: 4e-4 },
    { lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, maxGradNorm: 0, schedule: "constant", warmupSteps: 0, minLr: 0 } as never,
    0,
    1,
    { microBatchTokens: 4096, sharePrefix: true },
  );
  assert.ok(Number.isFinite(r.loss) && r.gradNorm > 0, `loss ${r.loss}, grad norm ${r.gradNorm}`);
  assert.equal(r.maskedFraction, 0, "on-policy: no sequence clipped");
  assert.ok(r.mismatchKl < 1e-9, `on-policy mismatch ${r.mismatchKl}`);
  // GSPO's gradient at s = 1 is the rl loss's with each token weighted 1/|y_i|/#sequences instead of 1/#tokens:
  // with equal lengths (6 each) the two differ by the constant #tokens / (6 * #sequences) = 1, so the norms match.
  const b = PolicyModel.create(cfg, { seed: 3, threads: 1 });
  const rl = await runTrainStep(
    b,
    samples,
    { name: "rl", maskLow: 0, maskHigh: Number.POSITIVE_INFINITY, klCoef: 0 },
    { lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, maxGradNorm: 0, schedule: "constant", warmupSteps: 0, minLr: 0 } as never,
    0,
    1,
    { microBatchTokens: 4096, sharePrefix: true },
  );
  assert.ok(Math.abs(r.gradNorm - rl.gradNorm) < 1e-4 * rl.gradNorm, `gspo ${r.gradNorm} vs rl ${rl.gradNorm}`);
  a.dispose();
  b.dispose();
});

test("gspo split by micro-batch (learner ranks): with the step's sequence count, each part's coefficients and the summed figures are the whole step's", () => {
  // Four micro-batches of 2-3 sequences, one sequence without loss tokens, log-ratios that clip some sequences.
  const mbs: PackedMicroBatch[] = [0, 1, 2, 3].map((k) => {
    const N = 9 + k;
    const segmentStarts = k === 2 ? Int32Array.of(0, 4) : Int32Array.of(0, 3, 6);
    const lossMask = Uint8Array.from({ length: N }, (_, t) => (t % 3 === 0 || (k === 1 && t >= 6) ? 0 : 1));
    const adv = Float32Array.from({ length: N }, (_, t) => ((t >> 2) % 2 ? 1 : -0.5) * (1 + k));
    return { tokens: new Int32Array(N), segmentStarts, lossMask, advantages: adv, samplerLogprobs: randF32(N, 90 + k, 0.8) };
  });
  const logp = mbs.map((mb, k) => randF32(mb.tokens.length, 95 + k, 0.8));
  const normalizer = 29;
  const whole = wholeStep(mbs, logp, SPEC, normalizer);
  assert.ok(whole.clippedTokens > 0 && whole.coefficients.some((c) => c.some((x) => x !== 0)), "some sequences clip, some train");
  // Two "ranks": micro-batches m % 2; each counts its sequences, the counts are summed (the all-reduce).
  const parts = [0, 1].map((r) => [0, 1, 2, 3].filter((m) => m % 2 === r));
  const sequences = parts.reduce((n, ms) => n + gspoSequenceCount(ms.map((m) => mbs[m]!)), 0);
  assert.equal(sequences, whole.sequences);
  const sums: GspoSums[] = parts.map((ms) => {
    const g: GspoSums = { loss: 0, clippedTokens: 0, mismatchKlSum: 0 };
    for (const m of ms) assert.deepEqual(gspoMicroBatch(mbs[m]!, logp[m]!, SPEC, normalizer, sequences, g), whole.coefficients[m]!, `micro-batch ${m}`);
    return g;
  });
  assert.ok(Math.abs(sums[0]!.loss + sums[1]!.loss - whole.loss) <= 1e-12 * Math.abs(whole.loss));
  assert.equal(sums[0]!.clippedTokens + sums[1]!.clippedTokens, whole.clippedTokens);
  assert.ok(Math.abs(sums[0]!.mismatchKlSum + sums[1]!.mismatchKlSum - whole.mismatchKlSum) <= 1e-12 * whole.mismatchKlSum);
  // Positive control: a rank that normalised by its own sequences only gets other coefficients.
  const own = gspoSequenceCount(parts[0]!.map((m) => mbs[m]!));
  assert.ok(own < sequences);
  const wrong = gspoMicroBatch(mbs[0]!, logp[0]!, SPEC, normalizer, own, { loss: 0, clippedTokens: 0, mismatchKlSum: 0 });
  assert.notDeepEqual(wrong, whole.coefficients[0]!);
});
