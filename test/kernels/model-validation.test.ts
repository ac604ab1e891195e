// Bad input at the boundary: wrong array types and lengths, ids outside the vocab, positions past the context,
// bad segments, bad configs and options. Each must throw (or reject) with a message naming the problem, and
// the model must keep working afterwards.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel, kernels } from "../../kernels/index.js";
import { tinyConfig } from "./helpers.js";

const cfg = tinyConfig({ maxPositionEmbeddings: 16 });
const good = () => ({
  tokens: Int32Array.from([1, 2, 3, 4, 5, 6]),
  segmentStarts: Int32Array.from([0, 3]),
  lossMask: Uint8Array.from([0, 1, 1, 0, 1, 1]),
  advantages: new Float32Array(6).fill(1),
  samplerLogprobs: new Float32Array(6).fill(-3.6),
});
const asAny = (x: unknown) => x as never;

test("bad configs throw naming the field", () => {
  assert.throws(() => PolicyModel.create({ ...cfg, hiddenSize: 18 }), /hiddenSize.*divisible by numHeads/s);
  assert.throws(() => PolicyModel.create({ ...cfg, numKvHeads: 3 }), /numHeads 4 is not divisible by numKvHeads 3/);
  assert.throws(() => PolicyModel.create({ ...cfg, hiddenSize: 12, numHeads: 4 }), /head dim.*must be even/);
  assert.throws(() => PolicyModel.create({ ...cfg, vocabSize: 0 }), /vocabSize/);
  assert.throws(() => PolicyModel.create({ ...cfg, rmsNormEps: -1 }), /rmsNormEps/);
  assert.throws(() => PolicyModel.create(asAny({ ...cfg, numLayers: undefined })), /numLayers/);
  assert.throws(() => PolicyModel.create(cfg, { threads: -1 }), /threads/);
  assert.throws(() => PolicyModel.create(cfg, { device: asAny("tpu") }), /device must be "auto", "cpu" or "cuda"/);
  assert.throws(() => PolicyModel.create(cfg, { device: "cuda" }), /CUDA backend is not built|no device/);
});

test("forward/accumulate reject wrong types, lengths, ids, positions and segments with clear messages", async () => {
  const m = PolicyModel.create(cfg, { threads: 2 });
  const rl = { name: "rl" as const };
  const cases: Array<[string, () => Promise<unknown>, RegExp]> = [
    ["tokens as a plain array", () => m.forward({ tokens: asAny([1, 2]), segmentStarts: Int32Array.of(0) }), /tokens must be a Int32Array \(got object\)/],
    [
      "tokens as Float32Array",
      () => m.forward({ tokens: asAny(new Float32Array(2)), segmentStarts: Int32Array.of(0) }),
      /tokens must be a Int32Array \(got Float32Array\)/,
    ],
    ["empty tokens", () => m.forward({ tokens: new Int32Array(0), segmentStarts: Int32Array.of(0) }), /tokens is empty/],
    ["id = vocab", () => m.forward({ tokens: Int32Array.of(1, 37), segmentStarts: Int32Array.of(0) }), /tokens\[1\] = 37 is outside the vocab \[0, 37\)/],
    ["negative id", () => m.forward({ tokens: Int32Array.of(-1), segmentStarts: Int32Array.of(0) }), /tokens\[0\] = -1 is outside the vocab/],
    [
      "position past context",
      () => m.forward({ tokens: new Int32Array(17), segmentStarts: Int32Array.of(0) }),
      /17 tokens long, past maxPositionEmbeddings 16/,
    ],
    ["segments not starting at 0", () => m.forward({ tokens: new Int32Array(4), segmentStarts: Int32Array.of(1) }), /segmentStarts\[0\] must be 0/],
    ["segments unsorted", () => m.forward({ tokens: new Int32Array(6), segmentStarts: Int32Array.of(0, 4, 2) }), /strictly increasing/],
    ["segment start past T", () => m.forward({ tokens: new Int32Array(6), segmentStarts: Int32Array.of(0, 6) }), /not below the token count 6/],
    ["empty segments", () => m.forward({ tokens: new Int32Array(6), segmentStarts: new Int32Array(0) }), /segmentStarts is empty/],
    ["lossMask length", () => m.accumulate({ ...good(), lossMask: new Uint8Array(5) }, rl, 4), /lossMask has length 5, expected 6/],
    ["lossMask type", () => m.accumulate({ ...good(), lossMask: asAny(new Int32Array(6)) }, rl, 4), /lossMask must be a Uint8Array/],
    [
      "lossMask at a segment start",
      () => m.accumulate({ ...good(), lossMask: Uint8Array.from([0, 1, 1, 1, 1, 1]) }, rl, 4),
      /lossMask\[3\] is set at a segment start/,
    ],
    ["lossMask value 2", () => m.accumulate({ ...good(), lossMask: Uint8Array.from([0, 2, 1, 0, 1, 1]) }, rl, 4), /must be 0 or 1/],
    ["advantages missing for rl", () => m.accumulate({ ...good(), advantages: undefined }, rl, 4), /needs advantages and samplerLogprobs/],
    ["advantages Float64Array", () => m.accumulate({ ...good(), advantages: asAny(new Float64Array(6)) }, rl, 4), /advantages must be a Float32Array/],
    ["NaN sampler logprob", () => m.accumulate({ ...good(), samplerLogprobs: new Float32Array(6).fill(NaN) }, rl, 4), /must be finite/],
    ["normalizer 0", () => m.accumulate(good(), rl, 0), /normalizer must be a positive finite number/],
    ["unknown loss", () => m.accumulate(good(), asAny({ name: "dpo" }), 4), /invalid loss spec/],
    ["ppo clipEps 1.5", () => m.accumulate(good(), { name: "ppo_clip", clipEps: 1.5 }, 4), /invalid loss spec.*clipEps/],
    ["ppo old key eps", () => m.accumulate(good(), asAny({ name: "ppo_clip", eps: 0.1 }), 4), /invalid loss spec.*Unrecognized key: "eps"/],
    ["unknown loss field", () => m.accumulate(good(), asAny({ name: "rl", clip: 3 }), 4), /invalid loss spec/],
    ["step without lr", () => m.step(asAny({})), /lr must be a finite number/],
    ["step beta1 1", () => m.step({ lr: 1e-3, beta1: 1 }), /beta1 and beta2 must be in \[0, 1\)/],
    ["generate empty prompt", () => m.generate({ prompts: [new Int32Array(0)], maxNewTokens: 2 }), /prompts\[0\] is empty/],
    ["generate prompt too long", () => m.generate({ prompts: [new Int32Array(17)], maxNewTokens: 2 }), /17 tokens, past maxPositionEmbeddings 16/],
    ["generate prompt id", () => m.generate({ prompts: [Int32Array.of(40)], maxNewTokens: 2 }), /outside the vocab/],
    ["generate no prompts", () => m.generate({ prompts: [], maxNewTokens: 2 }), /non-empty array/],
    ["generate topP 0", () => m.generate({ prompts: [Int32Array.of(1)], maxNewTokens: 2, topP: 0 }), /topP must be in \(0, 1\]/],
    ["generate negative temperature", () => m.generate({ prompts: [Int32Array.of(1)], maxNewTokens: 2, temperature: -1 }), /temperature/],
    ["generate eos out of vocab", () => m.generate({ prompts: [Int32Array.of(1)], maxNewTokens: 2, eosTokenId: 99 }), /eosTokenId/],
    ["generate seeds length", () => m.generate({ prompts: [Int32Array.of(1)], maxNewTokens: 2, seeds: [1, 2] }), /one seed per prompt/],
    [
      "generate empty stop",
      () => m.generate({ prompts: [Int32Array.of(1)], maxNewTokens: 2, stopSequences: [new Int32Array(0)] }),
      /stopSequences\[0\] is empty/,
    ],
  ];
  for (const [what, call, re] of cases) await assert.rejects(call(), re, what);
  // Still healthy after all that.
  const s = await m.accumulate(good(), rl, 4);
  assert.equal(s.lossTokens, 4);
  m.dispose();
});

test("buffers: setParams / importOptimizerState length-checked; sync access during a call and use after dispose throw", async () => {
  const m = PolicyModel.create(cfg, { threads: 2 });
  assert.throws(() => m.setParams(new Float32Array(m.numParams - 1)), /params has length \d+, expected \d+/);
  assert.throws(() => m.setParams(asAny(new Float64Array(m.numParams))), /must be a Float32Array/);
  assert.throws(() => m.importOptimizerState({ m: new Float32Array(3), v: new Float32Array(m.numParams), step: 1 }), /m has length 3/);
  const running = m.forward({ tokens: Int32Array.of(1, 2, 3), segmentStarts: Int32Array.of(0) });
  assert.throws(() => m.getParams(), /still running; await it first/);
  await running;
  assert.equal(m.getParams().length, m.numParams);
  // Calls queue behind each other instead of failing.
  const [a, b] = await Promise.all([
    m.forward({ tokens: Int32Array.of(1), segmentStarts: Int32Array.of(0) }),
    m.forward({ tokens: Int32Array.of(2), segmentStarts: Int32Array.of(0) }),
  ]);
  assert.equal(a.length + b.length, 2 * cfg.vocabSize);
  m.dispose();
  assert.throws(() => m.getParams(), /disposed/);
  await assert.rejects(m.forward({ tokens: Int32Array.of(1), segmentStarts: Int32Array.of(0) }), /disposed/);
});

test("optimizer: state export/import round-trips; a non-finite gradient skips the step", async () => {
  const m = PolicyModel.create(cfg, { threads: 2 });
  await m.accumulate(good(), { name: "sft" }, 4);
  const r = await m.step({ lr: 1e-3 });
  assert.equal(r.step, 1);
  assert.equal(r.skipped, false);
  assert.ok(
    m.getGrads().every((g) => g === 0),
    "grads zeroed after the step",
  );
  const st = m.exportOptimizerState();
  assert.equal(st.step, 1);
  assert.ok(st.v.some((x) => x > 0));
  const m2 = PolicyModel.create(cfg, { threads: 2 });
  m2.importOptimizerState(st);
  assert.deepEqual(m2.exportOptimizerState(), st);
  // Corrupt params -> NaN loss/grads -> the step is skipped, params untouched.
  const p = m.getParams();
  p[0] = NaN;
  m.setParams(p);
  await m.accumulate({ ...good(), tokens: Int32Array.from([0, 0, 0, 0, 0, 0]) }, { name: "sft" }, 4);
  const before = m.getParams();
  const s = await m.step({ lr: 1e-3 });
  assert.equal(s.skipped, true);
  assert.ok(Number.isNaN(s.gradNorm));
  assert.equal(s.step, 1);
  assert.deepEqual(m.getParams(), before);
  m.dispose();
  m2.dispose();
});

test("stand-alone kernels validate too", () => {
  assert.throws(() => kernels.rmsnormForward(new Float32Array(5), new Float32Array(2), 2, 2, 1e-5), /x has length 5, expected 4/);
  assert.throws(() => kernels.embeddingForward(new Float32Array(6), 3, 2, Int32Array.of(3)), /ids\[0\] = 3 is outside the vocab \[0, 3\)/);
  const d = { T: 4, heads: 4, kvHeads: 3, headDim: 2, segmentStarts: Int32Array.of(0) };
  assert.throws(() => kernels.attentionForward(new Float32Array(32), new Float32Array(24), new Float32Array(24), d), /not divisible by kvHeads/);
  assert.throws(
    () =>
      kernels.attentionForward(new Float32Array(8), new Float32Array(8), new Float32Array(8), {
        T: 4,
        heads: 1,
        kvHeads: 1,
        headDim: 2,
        segmentStarts: Int32Array.of(0, 0),
      }),
    /strictly increasing/,
  );
  assert.throws(() => kernels.ropeForward(new Float32Array(6), 1, 1, 6, Int32Array.of(-1), 10000), /position -1/);
  assert.throws(() => kernels.ropeForward(new Float32Array(3), 1, 1, 3, Int32Array.of(0), 10000), /even head_dim/);
  assert.throws(
    () =>
      kernels.lossForwardBackward({
        logits: new Float32Array(4),
        N: 1,
        vocab: 4,
        targets: Int32Array.of(4),
        mask: Uint8Array.of(1),
        loss: { name: "sft" },
        normalizer: 1,
      }),
    /target 4 at row 0 is outside the vocab/,
  );
});
