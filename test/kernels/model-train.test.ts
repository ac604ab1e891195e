// Training end to end on tiny models: SFT overfits a fixed set; a toy policy-gradient loop (sample with
// generate, reward tokens in a target set, group-mean advantages, the rl loss) raises its reward.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel } from "../../kernels/index.js";
import { randInts, tinyConfig } from "./helpers.js";

test("SFT overfits a fixed small set to near-zero loss within a few seconds", async () => {
  const cfg = tinyConfig({ hiddenSize: 32, intermediateSize: 64, numHeads: 4, numKvHeads: 2, vocabSize: 37, tieWordEmbeddings: false });
  const model = PolicyModel.create(cfg, { seed: 1, threads: 2 });
  const seqs = [0, 1, 2, 3].map((i) => randInts(16, 50 + i, cfg.vocabSize));
  const tokens = new Int32Array(64);
  seqs.forEach((s, i) => tokens.set(s, i * 16));
  const segmentStarts = Int32Array.from([0, 16, 32, 48]);
  const lossMask = Uint8Array.from(tokens, (_, t) => (t % 16 === 0 ? 0 : 1));
  const normalizer = 60;
  const started = Date.now();
  let first = 0,
    last = 0;
  for (let step = 0; step < 300; step++) {
    const s = await model.accumulate({ tokens, segmentStarts, lossMask }, { name: "sft" }, normalizer);
    if (step === 0) first = s.loss;
    last = s.loss;
    await model.step({ lr: 1e-2, weightDecay: 0, maxGradNorm: 1 });
    if (last < 0.02) break;
  }
  const seconds = (Date.now() - started) / 1000;
  assert.ok(first > 3, `initial loss ${first} should be about ln(37) = 3.6`);
  assert.ok(last < 0.05, `SFT loss only reached ${last} (from ${first})`);
  assert.ok(seconds < 10, `took ${seconds}s`);
  model.dispose();
});

test("toy policy gradient (generate -> reward -> group advantages -> rl loss) raises the reward", async () => {
  const cfg = tinyConfig({ hiddenSize: 32, intermediateSize: 64, vocabSize: 37, tieWordEmbeddings: true });
  const model = PolicyModel.create(cfg, { seed: 2, threads: 2 });
  const target = new Set([3, 5, 7, 11, 13]);
  const prompts = [Int32Array.from([1, 2]), Int32Array.from([4, 8, 9])];
  const groupSize = 16,
    newTokens = 4;
  const rewards: number[] = [];
  for (let step = 0; step < 30; step++) {
    const batchPrompts = prompts.flatMap((p) => Array.from({ length: groupSize }, () => p));
    const res = await model.generate({ prompts: batchPrompts, maxNewTokens: newTokens, temperature: 1, seed: 1000 + step });
    const r = res.map((o) => [...o.tokens].filter((t) => target.has(t)).length / newTokens);
    rewards.push(r.reduce((a, b) => a + b, 0) / r.length);
    // Pack every completion (prompt + completion) into one row; group-mean advantages on completion tokens.
    const total = res.reduce((a, o, i) => a + batchPrompts[i].length + o.tokens.length, 0);
    const tokens = new Int32Array(total),
      lossMask = new Uint8Array(total),
      advantages = new Float32Array(total),
      samplerLogprobs = new Float32Array(total);
    const starts: number[] = [];
    let at = 0;
    res.forEach((o, i) => {
      const g = Math.floor(i / groupSize);
      const mean = r.slice(g * groupSize, (g + 1) * groupSize).reduce((a, b) => a + b, 0) / groupSize;
      starts.push(at);
      tokens.set(batchPrompts[i], at);
      at += batchPrompts[i].length;
      tokens.set(o.tokens, at);
      for (let k = 0; k < o.tokens.length; k++) {
        lossMask[at + k] = 1;
        advantages[at + k] = r[i] - mean;
        samplerLogprobs[at + k] = o.logprobs[k];
      }
      at += o.tokens.length;
    });
    const normalizer = lossMask.reduce((a, b) => a + b, 0);
    const stats = await model.accumulate({ tokens, segmentStarts: Int32Array.from(starts), lossMask, advantages, samplerLogprobs }, { name: "rl" }, normalizer);
    // On-policy: the learner's logprobs equal the sampler's (same weights), so nothing is masked.
    assert.equal(stats.maskedTokens, 0);
    assert.ok(stats.mismatchKlSum / stats.lossTokens < 1e-6, `mismatch KL ${stats.mismatchKlSum / stats.lossTokens}`);
    await model.step({ lr: 2e-2, maxGradNorm: 1 });
  }
  const early = rewards.slice(0, 5).reduce((a, b) => a + b, 0) / 5;
  const late = rewards.slice(-5).reduce((a, b) => a + b, 0) / 5;
  assert.ok(late > early + 0.3, `reward did not rise enough: ${early.toFixed(3)} -> ${late.toFixed(3)} (${rewards.map((x) => x.toFixed(2)).join(" ")})`);
  model.dispose();
});
