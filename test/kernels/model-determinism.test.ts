// Replay depends on bit-identical results: same seed and inputs -> same params after training steps and the
// same generations; and (with our own sgemm) the same bits whatever the thread count.
import { test } from "node:test";
import assert from "node:assert/strict";
import { kernels, PolicyModel } from "../../kernels/index.js";
import { mulberry32, randInts, tinyConfig } from "./helpers.js";

const cfg = tinyConfig({ hiddenSize: 32, intermediateSize: 48, attentionBias: true, tieWordEmbeddings: false });

function batch(seed: number) {
  const r = mulberry32(seed);
  const tokens = randInts(40, seed, cfg.vocabSize);
  const segmentStarts = Int32Array.from([0, 13, 29]);
  const lossMask = Uint8Array.from(tokens, (_, t) => (segmentStarts.includes(t) ? 0 : 1));
  return {
    tokens,
    segmentStarts,
    lossMask,
    advantages: Float32Array.from(tokens, () => r() - 0.5),
    samplerLogprobs: Float32Array.from(tokens, () => -3.5 - r() * 0.3),
  };
}

async function train(threads: number, switchTo?: number): Promise<{ params: Float32Array; losses: number[]; gen: unknown }> {
  const model = PolicyModel.create(cfg, { seed: 77, threads });
  const losses: number[] = [];
  for (let step = 0; step < 4; step++) {
    // The learner's SFT -> RL switch: fewer threads half way through (actors.learner.rlThreads).
    if (step === 2 && switchTo !== undefined) {
      model.setThreads(switchTo);
      assert.equal(model.threads, switchTo);
    }
    for (let micro = 0; micro < 2; micro++) losses.push((await model.accumulate(batch(step * 2 + micro), { name: "rl" }, 74)).loss);
    await model.step({ lr: 1e-2, weightDecay: 0.1 });
  }
  const gen = await model.generate({ prompts: [Int32Array.from([1, 2, 3]), Int32Array.from([9])], maxNewTokens: 8, seed: 5, topP: 0.95 });
  const params = model.getParams();
  model.dispose();
  return { params, losses, gen };
}

test("same seed and inputs twice: bit-identical params, losses and generations", async () => {
  const a = await train(2);
  const b = await train(2);
  assert.deepEqual(b.losses, a.losses);
  assert.deepEqual(b.params, a.params);
  assert.deepEqual(b.gen, a.gen);
});

test("our kernels give the same bits on 1 and 2 threads, and with the AVX2 or AVX-512 sgemm", async () => {
  kernels.setBlasMode("off");
  try {
    const one = await train(1);
    const two = await train(2);
    assert.deepEqual(two.losses, one.losses);
    assert.deepEqual(two.params, one.params);
    assert.deepEqual(two.gen, one.gen);
    const switched = await train(2, 1);
    assert.deepEqual(switched.params, two.params, "changing threads mid-run changes no bit");
    assert.deepEqual(switched.gen, two.gen);
    kernels.setAvx512(false);
    const narrow = await train(2);
    assert.deepEqual(narrow.params, two.params);
    assert.deepEqual(narrow.gen, two.gen);
  } finally {
    kernels.setBlasMode("auto");
    kernels.setAvx512(true);
  }
});

test("setThreads: 0 means all cores; out-of-range counts are refused", () => {
  const model = PolicyModel.create(cfg, { seed: 1, threads: 1 });
  try {
    const probe = PolicyModel.create(cfg, { seed: 1 });
    const all = probe.threads;
    probe.dispose();
    model.setThreads(0);
    assert.equal(model.threads, all);
    assert.throws(() => model.setThreads(-1), /threads/);
    assert.throws(() => model.setThreads(1.5), /threads/);
    assert.throws(() => model.setThreads(5000), /threads/);
  } finally {
    model.dispose();
  }
});

test("a different init seed gives different params", () => {
  const a = PolicyModel.create(cfg, { seed: 1 });
  const b = PolicyModel.create(cfg, { seed: 2 });
  assert.notDeepEqual(a.getParams(), b.getParams());
  a.dispose();
  b.dispose();
});
