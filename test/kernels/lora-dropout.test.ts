// LoRA dropout (model.lora.dropout > 0), PEFT's definition: y = W0 x + scale * B A drop(x), a fresh mask per adapted
// module, token and input element, kept values scaled by 1 / (1 - p). The kernels' loss equals an f64 reference that
// spells that forward out with the same masks, and the adapters' gradient equals its finite differences; a dropout that
// drops nothing goes through the correction and gives dropout 0's steps bit for bit; a step's masks are a function of
// (lora.seed, step, micro-batch), so the same step trains the same bits again (replay) and another seed or step does not.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel } from "../../kernels/index.js";
import { dropoutSeed, LoraAdapters, LoraSchema, loraTargets } from "../../kernels/lora.js";
import { decodeTrainStateWithLora, encodeTrainState } from "../../kernels/train-state.js";
import { runTrainStep } from "../../kernels/train-step.js";
import { finiteDifferenceGrad, linear, sftLoss, tokenLogprobs } from "../reference/llama-f64.js";
import { f64, randF32, randInts, tinyConfig, weightsOf } from "./helpers.js";

const cfg = tinyConfig({ hiddenSize: 16, intermediateSize: 24, vocabSize: 37, tieWordEmbeddings: false });
const T = 12;
const tokens = randInts(T, 5, cfg.vocabSize);
const segmentStarts = Int32Array.from([0, 7]);
const lossMask = Uint8Array.from(tokens, (_, t) => (t === 0 || t === 7 ? 0 : 1));
const normalizer = 10;
const batch = { tokens, segmentStarts, lossMask };
const opt = { lr: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, schedule: "constant", warmupSteps: 0, minLr: 0 } as never;
const pack = { microBatchTokens: 24, sharePrefix: false };
const samples = [0, 1, 2, 3].map((i) => ({
  promptIds: randInts(4, 80 + i, cfg.vocabSize),
  completionIds: randInts(6, 90 + i, cfg.vocabSize),
  completionMask: new Uint8Array(6).fill(1),
  samplerLogprobs: new Float32Array(6),
  advantage: 0,
}));

function setup(dropout: number, seed = 0) {
  const model = PolicyModel.create(cfg, { seed: 3, threads: 1 });
  const s = LoraSchema.parse({ rank: 4, alpha: 8, dropout, seed, targetModules: ["all-linear"] });
  const lora = new LoraAdapters(s, loraTargets(model.tensors(), s), model.getParams());
  // B starts at zero (PEFT's init), where the mask cannot change the loss; give it values.
  for (const t of lora.targets) lora.params.set(randF32(t.out * s.rank, 40 + t.b, 0.3), t.b);
  lora.load(model);
  return { model, lora, base: lora.baseOf(model.getParams()) };
}

/** kernels/shared/lora_dropout.h in BigInt: the factor drop(x) / x of module k, token t, element j. */
function keep(seed: number, k: number, t: number, j: number, p: number): number {
  const M = (1n << 64n) - 1n;
  const mix = (a: bigint, b: bigint) => {
    let x = (a ^ ((b * 0x9e3779b97f4a7c15n + 0x632be59bd9b4e019n) & M)) & M;
    x ^= x >> 30n;
    x = (x * 0xbf58476d1ce4e5b9n) & M;
    x ^= x >> 27n;
    x = (x * 0x94d049bb133111ebn) & M;
    return x ^ (x >> 31n);
  };
  const h = mix(mix(mix(BigInt(seed), BigInt(k)), BigInt(t)), BigInt(j));
  return Number(h >> 11n) / 2 ** 53 < p ? 0 : 1 / (1 - p);
}

test("dropout 0.3: the loss is PEFT's W0 x + scale * B A drop(x) (f64 reference) and the adapters' gradient its finite differences", async () => {
  const { model, lora, base: baseParams } = setup(0.3);
  try {
    const step = 5;
    lora.beforeMicro(model, step, 0);
    const kernelLoss = (await model.accumulate(batch, { name: "sft" }, normalizer)).loss;
    const analytic = lora.gradientsOf(model);
    const seed = dropoutSeed(lora.settings.seed, step, 0);
    const base = weightsOf(model, baseParams);
    const adapters = f64(lora.params);
    const r = lora.settings.rank;
    const byWeight = new Map(lora.targets.map((t, k) => [base.get(`${t.module}.weight`)!, { t, k }]));
    const reference = (p: number) => {
      const proj: typeof linear = (x, n, inDim, W, outDim, b) => {
        const y = linear(x, n, inDim, W, outDim, b);
        const hit = byWeight.get(W);
        if (!hit) return y;
        const { t, k } = hit;
        const dropped = Float64Array.from(x, (v, i) => v * keep(seed, k, Math.floor(i / inDim), i % inDim, p));
        const u = linear(dropped, n, inDim, adapters.subarray(t.a, t.a + r * t.in), r);
        const c = linear(u, n, r, adapters.subarray(t.b, t.b + t.out * r), outDim);
        return y.map((v, i) => v + lora.scale * c[i]!);
      };
      return sftLoss({ logprobs: tokenLogprobs(cfg, base, tokens, segmentStarts, { linear: proj }), lossMask, normalizer });
    };
    const ref = reference(0.3);
    assert.ok(Math.abs(kernelLoss - ref) <= 1e-5 * Math.abs(ref), `kernel loss ${kernelLoss}, f64 reference ${ref}`);
    // Positive control: without the mask the reference is another loss (the dropout changes the forward).
    const noDrop = reference(0);
    assert.ok(Math.abs(noDrop - ref) > 1e-4, `dropout moves the loss (${noDrop} vs ${ref})`);
    // Entries of A and of B in every target (q, k, v, o, gate, up, down of both layers).
    const indices = lora.targets.flatMap((t) => [t.a, t.a + 5, t.a + r * t.in - 1, t.b, t.b + 3, t.b + t.out * r - 1]);
    const numeric = finiteDifferenceGrad(() => reference(0.3), adapters, indices, 1e-4);
    indices.forEach((idx, j) => {
      const a = analytic[idx]!;
      const n = numeric[j]!;
      assert.ok(Math.abs(a - n) <= 2e-3 * Math.max(1e-2, Math.abs(n)), `adapter value ${idx}: analytic ${a}, finite difference ${n}`);
    });
    // Positive control: the projection of the merged weights' gradient alone (no correction) is not the gradient.
    const projected = lora.gradients(model.readRanges("grads", lora.ranges));
    assert.ok(indices.some((idx, j) => Math.abs(projected[idx]! - numeric[j]!) > 1e-2 * Math.max(1e-2, Math.abs(numeric[j]!))));
  } finally {
    model.dispose();
  }
});

async function train(dropout: number, seed: number, steps: number[]) {
  const { model, lora } = setup(dropout, seed);
  try {
    const losses: number[] = [];
    const norms: number[] = [];
    for (const s of steps) {
      const r = await runTrainStep(model, samples, { name: "sft" }, opt, s, 10, pack, lora);
      losses.push(r.loss);
      norms.push(r.gradNorm);
    }
    return { losses, norms, params: Float32Array.from(lora.params), model: model.getParams() };
  } finally {
    model.dispose();
  }
}

test("a dropout that drops nothing runs the correction and gives dropout 0's steps bit for bit", async () => {
  const off = await train(0, 0, [0, 1, 2]);
  const tiny = await train(1e-12, 0, [0, 1, 2]);
  assert.deepEqual(tiny.losses, off.losses);
  assert.deepEqual(tiny.norms, off.norms);
  assert.deepEqual(tiny.params, off.params);
  assert.deepEqual(tiny.model, off.model);
  // Positive control: a real dropout changes the steps.
  const on = await train(0.3, 0, [0, 1, 2]);
  assert.notDeepEqual(on.norms, off.norms);
});

test("replay: the same step draws the same masks (bit-identical), another seed or step does not", async () => {
  const a = await train(0.25, 7, [0, 1, 2]);
  const b = await train(0.25, 7, [0, 1, 2]);
  assert.deepEqual(b.losses, a.losses);
  assert.deepEqual(b.norms, a.norms);
  assert.deepEqual(b.params, a.params);
  // Positive controls: another lora.seed, or the same data at other step numbers, trains other bits.
  const otherSeed = await train(0.25, 8, [0, 1, 2]);
  assert.notEqual(otherSeed.losses[1], a.losses[1]);
  assert.notEqual(otherSeed.norms[0], a.norms[0]);
  const otherSteps = await train(0.25, 7, [3, 4, 5]);
  assert.notEqual(otherSteps.norms[0], a.norms[0]);
});

test("replay from a checkpoint: the resumed step trains the bits the run trained", async () => {
  const run = setup(0.2, 3);
  const other = PolicyModel.create(cfg, { seed: 99, threads: 1 });
  try {
    await runTrainStep(run.model, samples, { name: "sft" }, opt, 0, 10, pack, run.lora);
    const counters = { step: 1, sftDone: true, readerSeq: 0, droppedStale: 0, samplesSeen: 4, optimizerStep: 1 };
    const state = encodeTrainState(run.model, counters, run.lora, "tiny-base");
    const recorded = await runTrainStep(run.model, samples, { name: "sft" }, opt, 1, 10, pack, run.lora);
    const restored = decodeTrainStateWithLora(other, state);
    assert.equal(restored.lora?.settings.dropout, 0.2);
    const replayed = await runTrainStep(other, samples, { name: "sft" }, opt, 1, 10, pack, restored.lora);
    assert.equal(replayed.loss, recorded.loss);
    assert.equal(replayed.gradNorm, recorded.gradNorm);
    assert.deepEqual(other.getParams(), run.model.getParams());
  } finally {
    run.model.dispose();
    other.dispose();
  }
});

test("model.lora.dropout must lie in [0, 1)", () => {
  assert.throws(() => LoraSchema.parse({ rank: 4, dropout: 1 }));
  assert.throws(() => LoraSchema.parse({ rank: 4, dropout: -0.1 }));
  assert.equal(LoraSchema.parse({ rank: 4, dropout: 0.05 }).dropout, 0.05);
});
