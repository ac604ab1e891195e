// Group-prefix packing (kernels.h seg_parent; kernels/packing.ts sharePrefix): a group's shared prompt laid out once,
// each completion a child segment that sees the prompt and itself, at positions continuing from the prompt. The
// loss, every gradient and three optimizer steps must be those of the unpacked rows: checked against the f64
// reference on the unpacked rows (loss, and finite differences for a sample of every tensor's gradient) and against
// the same kernels on the unpacked rows. Positive controls: a wrong mask (completions that do not see the prompt)
// and wrong positions (restarting at 0 in each completion) must fail the same checks.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel, type LossSpec } from "../../kernels/index.js";
import { packSamples, type PackedMicroBatch, type TrainSample } from "../../kernels/packing.js";
import { runTrainStep, trainOnSamples } from "../../kernels/train-step.js";
import { parseLossSpec } from "../../kernels/loss-spec.js";
import { type LayoutOptions, randomWeights, rlLoss, sftLoss, tokenLogprobs, type Weights } from "../reference/llama-f64.js";
import { assertClose, flatParams, mulberry32, randInts, tinyConfig, weightsOf } from "./helpers.js";

const cfg = tinyConfig({ attentionBias: true, tieWordEmbeddings: false });

function sample(prompt: Int32Array, completion: ArrayLike<number>, seed: number, masked = 0): TrainSample {
  const r = mulberry32(seed);
  // The first `masked` completion tokens are not trained (tool output in a multi-turn row); the rest mostly are.
  const completionMask = Uint8Array.from(completion, (_, j) => (j >= masked && r() < 0.85 ? 1 : 0));
  if (masked === 0) completionMask[0] = 1; // the first completion token: predicted by the prompt's last row
  return {
    promptIds: prompt,
    completionIds: Int32Array.from(completion),
    completionMask,
    samplerLogprobs: Float32Array.from(completion, () => -3.6 + (r() - 0.5) * 0.4),
    advantage: r() * 2 - 1,
  };
}

// A group of 4 completions of one prompt; a lone sample; two multi-turn rows whose common history runs past the
// prompt into the (untrained) start of their completions.
const prompt = randInts(8, 1, 37);
const history = randInts(5, 2, 37);
const samples: TrainSample[] = [
  sample(prompt, randInts(5, 10, 37), 20),
  sample(prompt, randInts(3, 11, 37), 21),
  sample(randInts(6, 3, 37), randInts(4, 12, 37), 22),
  sample(prompt, randInts(6, 13, 37), 23),
  sample(randInts(4, 4, 37), [...history, ...randInts(3, 14, 37)], 24, 5),
  sample(prompt, randInts(4, 15, 37), 25),
  sample(randInts(4, 4, 37), [...history, ...randInts(4, 16, 37)], 26, 5),
];

const unpacked = packSamples(samples, 4096, cfg.maxPositionEmbeddings);
const normalizer = unpacked.lossTokens;
const one = (mbs: PackedMicroBatch[]) => {
  assert.equal(mbs.length, 1);
  return mbs[0]!;
};

/** The f64 loss of a layout of the samples. */
function refLoss(W: Weights, mb: PackedMicroBatch, loss: "rl" | "sft", opts: LayoutOptions = {}): number {
  const logprobs = tokenLogprobs(cfg, W, mb.tokens, mb.segmentStarts, { segmentParents: mb.segmentParents, ...opts });
  return loss === "sft"
    ? sftLoss({ logprobs, lossMask: mb.lossMask, normalizer })
    : rlLoss({
        logprobs,
        lossMask: mb.lossMask,
        normalizer,
        advantages: Float64Array.from(mb.advantages),
        samplerLogprobs: Float64Array.from(mb.samplerLogprobs),
      });
}

/** Problems of kernel (loss, grads) against a reference loss function: loss, and central differences per tensor. */
function mismatches(model: PolicyModel, W: Weights, kernelLoss: number, grads: Float32Array, ref: () => number): string[] {
  const out: string[] = [];
  const want = ref();
  if (!(Math.abs(kernelLoss - want) <= 1e-5 * Math.max(1, Math.abs(want)))) out.push(`loss ${kernelLoss} vs ${want}`);
  const rand = mulberry32(7);
  for (const e of model.tensors()) {
    const w = W.get(e.name)!;
    const scale = Math.max(...Array.from(grads.subarray(e.offset, e.offset + e.size), Math.abs));
    for (const i of new Set(Array.from({ length: Math.min(e.size, 6) }, () => Math.floor(rand() * e.size)))) {
      const o = w[i]!;
      const h = 1e-5;
      w[i] = o + h;
      const a = ref();
      w[i] = o - h;
      const b = ref();
      w[i] = o;
      const num = (a - b) / (2 * h);
      const got = grads[e.offset + i]!;
      if (!(Math.abs(got - num) <= 2e-4 * scale + 1e-6)) out.push(`${e.name}[${i}]: analytic ${got} vs numeric ${num}`);
    }
  }
  return out;
}

test("group-prefix packing: the layout lays each shared prefix out once, children after their parent", () => {
  const packed = one(packSamples(samples, 4096, cfg.maxPositionEmbeddings, { sharePrefix: true }).microBatches);
  const parents = packed.segmentParents!;
  assert.ok(parents, "a layout with shared prefixes names segment parents");
  // The group: its prompt (8 tokens) once and four children; the multi-turn pair: prompt + history (9) once and two
  // children; the lone sample a root.
  const roots = [...parents.keys()].filter((s) => parents[s] === -1);
  const len = (s: number) => (s + 1 < packed.segmentStarts.length ? packed.segmentStarts[s + 1]! : packed.tokens.length) - packed.segmentStarts[s]!;
  const children = (p: number) => [...parents.keys()].filter((s) => parents[s] === p);
  assert.deepEqual(
    roots.map((r) => [len(r), children(r).length]),
    [
      [8, 4],
      [10, 0],
      [9, 2],
    ],
  );
  const p = packSamples(samples, 4096, cfg.maxPositionEmbeddings, { sharePrefix: true });
  assert.equal(p.unpackedTokens, unpacked.totalTokens);
  assert.equal(p.totalTokens, unpacked.totalTokens - 3 * 8 - 9);
  assert.equal(p.lossTokens, unpacked.lossTokens);
  // Off: every sample whole, no parents.
  assert.equal(unpacked.microBatches[0]!.segmentParents, undefined);
});

for (const loss of ["rl", "sft"] as const) {
  test(`group-prefix packing (${loss}): loss and every gradient equal the unpacked rows' (f64 reference, finite differences, kernels)`, async () => {
    const model = PolicyModel.create(cfg, { seed: 1, threads: 2 });
    model.setParams(flatParams(model, randomWeights(cfg, 42)));
    const W = weightsOf(model);
    const spec: LossSpec = { name: loss };
    const flat = one(unpacked.microBatches);
    const packed = one(packSamples(samples, 4096, cfg.maxPositionEmbeddings, { sharePrefix: true }).microBatches);
    // The reference computes the packed layout as it computes the unpacked rows (its own implementation of the mask).
    assert.ok(Math.abs(refLoss(W, packed, loss) - refLoss(W, flat, loss)) < 1e-12, "f64: packed layout == unpacked rows");

    const alone = await model.accumulate(flat, spec, normalizer);
    const aloneGrads = model.getGrads();
    model.zeroGrad();
    const s = await model.accumulate(packed, spec, normalizer);
    const grads = model.getGrads();
    model.zeroGrad();
    assert.equal(s.lossTokens, normalizer);
    assert.ok(Math.abs(s.loss - alone.loss) < 1e-6 * Math.max(1, Math.abs(alone.loss)), `loss ${s.loss} vs unpacked ${alone.loss}`);
    assert.ok(Math.abs(s.entropySum - alone.entropySum) < 1e-5 * alone.entropySum);
    assertClose(grads, aloneGrads, "packed vs unpacked grads", 1e-5, 1e-9);
    assert.deepEqual(
      mismatches(model, W, s.loss, grads, () => refLoss(W, flat, loss)),
      [],
    );

    // Positive control 1, a wrong mask: the same layout with every segment a root (completions blind to the prompt).
    const blind = { ...packed, segmentParents: packed.segmentParents!.map(() => -1), lossMask: packed.lossMask.slice() };
    for (const st of blind.segmentStarts) blind.lossMask[st] = 0; // nothing predicts a root's first token
    const b = await model.accumulate(blind, spec, normalizer);
    const blindGrads = model.getGrads();
    model.zeroGrad();
    assert.ok(mismatches(model, W, b.loss, blindGrads, () => refLoss(W, flat, loss)).length > 0, "a wrong mask fails the check");
    // Positive control 2, wrong positions: the reference with the right mask but positions restarting in each child
    // disagrees with the kernels.
    const starts = Array.from(packed.segmentStarts);
    const restart = Int32Array.from(packed.tokens, (_, t) => t - Math.max(...starts.filter((x) => x <= t)));
    assert.ok(mismatches(model, W, s.loss, grads, () => refLoss(W, packed, loss, { positions: restart })).length > 0, "wrong positions fail the check");
    model.dispose();
  });
}

test("group-prefix packing: three optimizer steps equal the unpacked rows' (a family split over micro-batches too)", async () => {
  const opt = { lr: 3e-2, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.01, maxGradNorm: 1, schedule: "constant", warmupSteps: 0, minLr: 0 } as never;
  const spec = parseLossSpec({ name: "rl" });
  const run = async (microBatchTokens: number, sharePrefix: boolean) => {
    const model = PolicyModel.create(cfg, { seed: 5, threads: 2 });
    const packed = packSamples(samples, microBatchTokens, cfg.maxPositionEmbeddings, { sharePrefix });
    const losses: number[] = [];
    for (let i = 0; i < 3; i++) losses.push((await trainOnSamples(model, packed, spec, opt)).loss);
    const params = model.getParams();
    model.dispose();
    return { losses, params, microBatches: packed.microBatches.length, tokens: packed.totalTokens };
  };
  const base = await run(4096, false);
  for (const mbt of [4096, 20]) {
    const got = await run(mbt, true);
    if (mbt === 20) assert.ok(got.microBatches > 2 && got.tokens < base.tokens, `split: ${got.microBatches} micro-batches, ${got.tokens} tokens`);
    got.losses.forEach((l, i) =>
      assert.ok(Math.abs(l - base.losses[i]!) < 1e-5 * Math.max(1, Math.abs(base.losses[i]!)), `step ${i + 1}: ${l} vs ${base.losses[i]}`),
    );
    assertClose(got.params, base.params, `params after 3 steps (micro-batch ${mbt})`, 1e-5, 1e-7);
  }
  // Positive control: a different batch (one completion left out) moves the params measurably.
  const other = PolicyModel.create(cfg, { seed: 5, threads: 2 });
  const fewer = packSamples(samples.slice(1), 4096, cfg.maxPositionEmbeddings, { sharePrefix: true });
  for (let i = 0; i < 3; i++) await trainOnSamples(other, fewer, spec, opt);
  assert.throws(() => assertClose(other.getParams(), base.params, "control", 1e-5, 1e-7));
  other.dispose();
});

test("group-prefix packing: the kernels reject a child that does not follow its parent, and one past the context", async () => {
  const model = PolicyModel.create(cfg, { seed: 1, threads: 1 });
  const tokens = randInts(12, 3, 37);
  const lossMask = new Uint8Array(12);
  const bad = [
    [Int32Array.of(0, 4, 8), Int32Array.of(-1, -1, 0), /must follow its parent/],
    [Int32Array.of(0, 4, 8), Int32Array.of(-1, 0, 1), /parents must be roots/],
    [Int32Array.of(0, 4), Int32Array.of(0, -1), /must be -1 or an earlier segment/],
  ] as const;
  for (const [segmentStarts, segmentParents, msg] of bad) {
    await assert.rejects(model.forward({ tokens, segmentStarts, segmentParents }), msg);
    await assert.rejects(model.accumulate({ tokens, segmentStarts, segmentParents, lossMask }, { name: "sft" }, 1), msg);
  }
  const small = PolicyModel.create(tinyConfig({ maxPositionEmbeddings: 8 }), { seed: 1, threads: 1 });
  await assert.rejects(small.forward({ tokens, segmentStarts: Int32Array.of(0, 5), segmentParents: Int32Array.of(-1, 0) }), /past maxPositionEmbeddings 8/);
  model.dispose();
  small.dispose();
});

// The demo's shape of an RL step (examples/demo.yaml: groups of 8, a chat template every prompt starts with, several
// groups per micro-batch, completions that often repeat within a group, group-relative advantages, some groups all
// equal): every tensor's gradient, the loss and the step's gradient norm through runTrainStep, with sharing on and
// off, on 1 and 3 threads, with every group in one micro-batch and with groups split over micro-batches. The issue
// (a demo run with sharing on learned less, its steps' gradient norm lower) named these configurations as untested.
function demoStep(groups: number, seed: number): TrainSample[] {
  const r = mulberry32(seed);
  const template = [1, 2, 3];
  const out: TrainSample[] = [];
  for (let g = 0; g < groups; g++) {
    const prompt = Int32Array.from([...template, ...randInts(5 + (g % 2), 100 + g, 37)]);
    const variants = [0, 1, 2].map((v) => randInts(8 + Math.floor(r() * 12), 200 + 3 * g + v, 37));
    const picks = Array.from({ length: 8 }, () => Math.floor(r() * 3));
    const rewards: number[] = picks.map((v) => (g % 3 === 2 ? 1 : v === 0 ? 1 : 0)); // every third group all right: zero advantage
    const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
    for (const [i, v] of picks.entries()) {
      const completion = variants[v]!;
      out.push({
        promptIds: prompt,
        completionIds: completion,
        completionMask: new Uint8Array(completion.length).fill(1),
        samplerLogprobs: Float32Array.from(completion, () => -3.6 + (r() - 0.5) * 0.4),
        advantage: rewards[i]! - mean,
      });
    }
  }
  return out;
}

test("group-prefix packing at the demo's shapes (groups of 8, several per micro-batch, split groups, 1 and 3 threads): every tensor's gradient and the step's grad norm equal the unpacked rows'", async () => {
  const demoCfg = tinyConfig({ vocabSize: 40, hiddenSize: 32, intermediateSize: 48, tieWordEmbeddings: true });
  const rows = demoStep(6, 31);
  const spec = parseLossSpec({ name: "rl", maskLow: 0.125, maskHigh: 8 });
  const opt = { lr: 1e-3, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, schedule: "constant", warmupSteps: 0, minLr: 0 } as never;
  const grads = async (model: PolicyModel, mbs: PackedMicroBatch[], normalizer: number) => {
    model.zeroGrad();
    let loss = 0;
    for (const mb of mbs) loss += (await model.accumulate(mb, spec, normalizer)).loss;
    const g = model.getGrads();
    model.zeroGrad();
    return { loss, g };
  };
  const perTensor = (model: PolicyModel, got: Float32Array, want: Float32Array, what: string) => {
    for (const e of model.tensors())
      assertClose(got.subarray(e.offset, e.offset + e.size), want.subarray(e.offset, e.offset + e.size), `${what}: ${e.name}`, 1e-5, 1e-9);
  };
  for (const threads of [1, 3]) {
    const model = PolicyModel.create(demoCfg, { seed: 3, threads });
    const flat = packSamples(rows, 4096, demoCfg.maxPositionEmbeddings);
    const want = await grads(model, flat.microBatches, flat.lossTokens);
    for (const mbt of [4096, 160]) {
      const packed = packSamples(rows, mbt, demoCfg.maxPositionEmbeddings, { sharePrefix: true });
      assert.equal(packed.lossTokens, flat.lossTokens);
      if (mbt === 4096) {
        // One family per group (its prompt), not one over the template every prompt starts with.
        const parents = packed.microBatches[0]!.segmentParents!;
        const roots = [...parents.keys()].filter((s) => parents[s] === -1);
        assert.deepEqual(
          roots.map((p) => parents.filter((q) => q === p).length),
          [8, 8, 8, 8, 8, 8],
        );
      } else assert.ok(packed.microBatches.length > 2, `${packed.microBatches.length} micro-batches`);
      const got = await grads(model, packed.microBatches, packed.lossTokens);
      const what = `${threads} thread(s), micro-batch ${mbt}`;
      assert.ok(Math.abs(got.loss - want.loss) <= 1e-6 * Math.max(1, Math.abs(want.loss)), `${what}: loss ${got.loss} vs ${want.loss}`);
      perTensor(model, got.g, want.g, what);
    }
    // Positive controls, two of the suspects: advantages swapped between two completions of a group with
    // different rewards, and a child's first token (the one the prompt's last row predicts) left out of the loss: each
    // changes the gradient past the tolerance.
    const packed = packSamples(rows, 4096, demoCfg.maxPositionEmbeddings, { sharePrefix: true });
    const mb = packed.microBatches[0]!;
    const childStart = (k: number) => mb.segmentStarts[k]!;
    const swapped = { ...mb, advantages: mb.advantages.slice() };
    const [a, b] = [1, 2].map((k) => childStart(k));
    const [aEnd, bEnd] = [2, 3].map((k) => childStart(k));
    const [advA, advB] = [mb.advantages[a]!, mb.advantages[b]!];
    assert.notEqual(advA, advB, "the control needs two completions with different advantages");
    swapped.advantages.fill(advB, a, aEnd!);
    swapped.advantages.fill(advA, b, bEnd!);
    const firstLeftOut = { ...mb, lossMask: mb.lossMask.slice() };
    firstLeftOut.lossMask[a!] = 0;
    for (const [name, bad] of [
      ["swapped advantages", swapped],
      ["a child's first token left out", firstLeftOut],
    ] as const) {
      const g = await grads(model, [bad], packed.lossTokens);
      assert.throws(() => perTensor(model, g.g, want.g, name), assert.AssertionError, `${name} passes the check`);
    }
    // Through the learner's own call: the step's loss, loss tokens and gradient norm (what steps.jsonl records).
    const steps = await Promise.all(
      [false, true].map(async (sharePrefix) => {
        const m = PolicyModel.create(demoCfg, { seed: 3, threads });
        const r = await runTrainStep(m, rows, spec, opt, 0, 1, { microBatchTokens: 160, sharePrefix });
        m.dispose();
        return r;
      }),
    );
    assert.equal(steps[1]!.lossTokens, steps[0]!.lossTokens);
    assert.ok(steps[1]!.tokens < steps[0]!.tokens, `shared: ${steps[1]!.tokens} tokens vs ${steps[0]!.tokens}`);
    assert.ok(Math.abs(steps[1]!.gradNorm - steps[0]!.gradNorm) <= 1e-5 * steps[0]!.gradNorm, `grad norm ${steps[1]!.gradNorm} vs ${steps[0]!.gradNorm}`);
    model.dispose();
  }
});
