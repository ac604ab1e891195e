// The whole model against the float64 reference (test/reference/llama-f64.ts): logits, and the analytic
// gradient of every parameter tensor (a sample of entries each) against central differences of the reference
// loss, for tied/untied embeddings with and without q/k/v biases, on a packed row of two sequences.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel } from "../../kernels/index.js";
import { forwardLogits, randomWeights, rlLoss, sftLoss, tokenLogprobs, weightShapes } from "../reference/llama-f64.js";
import { assertClose, flatParams, mulberry32, tinyConfig, weightsOf } from "./helpers.js";

const tokens = Int32Array.from([5, 17, 3, 36, 0, 22, 9, 1, 30, 12, 7, 7, 19]);
const segmentStarts = Int32Array.from([0, 7]);
const lossMask = Uint8Array.from([0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1]);

for (const tied of [true, false]) {
  for (const bias of [false, true]) {
    const cfg = tinyConfig({ tieWordEmbeddings: tied, attentionBias: bias });
    const label = `${tied ? "tied" : "untied"}${bias ? " + qkv bias" : ""}`;

    test(`model (${label}): layout covers every HF tensor once, in order, contiguous`, () => {
      const model = PolicyModel.create(cfg, { seed: 1, threads: 2 });
      const t = model.tensors();
      const want = weightShapes(cfg);
      assert.deepEqual(new Set(t.map((e) => e.name)), new Set(want.keys()));
      let off = 0;
      for (const e of t) {
        assert.equal(e.offset, off, `${e.name} offset`);
        assert.deepEqual(e.shape, want.get(e.name), `${e.name} shape`);
        off += e.size;
      }
      assert.equal(off, model.numParams);
      // Init: norms 1, biases 0, matrices ~ N(0, 0.02).
      const p = model.getParams();
      for (const e of t) {
        const v = p.subarray(e.offset, e.offset + e.size);
        if (e.name.endsWith("norm.weight"))
          assert.ok(
            v.every((x) => x === 1),
            e.name,
          );
        else if (e.name.endsWith(".bias"))
          assert.ok(
            v.every((x) => x === 0),
            e.name,
          );
        else {
          const sd = Math.sqrt(v.reduce((s, x) => s + x * x, 0) / v.length);
          assert.ok(sd > 0.002 && sd < 0.03, `${e.name} std ${sd}`);
        }
      }
      model.dispose();
    });

    for (const lossName of ["rl", "sft"] as const) {
      test(`model (${label}) ${lossName}: logits and every tensor's gradient match the f64 reference`, async () => {
        const model = PolicyModel.create(cfg, { seed: 1, threads: 2 });
        model.setParams(flatParams(model, randomWeights(cfg, 42)));
        const W = weightsOf(model);
        const logits = await model.forward({ tokens, segmentStarts });
        assertClose(logits, forwardLogits(cfg, W, tokens, segmentStarts), "logits", 1e-5);

        // Sampler logprobs a fixed offset from the learner's, so ratios are known: two tokens far outside
        // [1/8, 8] (masked), the rest inside.
        const lp = tokenLogprobs(cfg, W, tokens, segmentStarts);
        const offsets = [0, 0.3, -0.2, 3, 0, 0.1, -0.5, 0, -3, 0.25, 0.05, -0.1, 0.4];
        const samplerLogprobs = Float32Array.from(lp, (x, t) => (Number.isNaN(x) ? 0 : x - offsets[t]));
        const advantages = Float32Array.from({ length: tokens.length }, (_, t) => Math.sin(t + 1));
        const normalizer = 9;
        const refLoss = () => {
          const logprobs = tokenLogprobs(cfg, W, tokens, segmentStarts);
          return lossName === "sft"
            ? sftLoss({ logprobs, lossMask, normalizer })
            : rlLoss({ logprobs, lossMask, normalizer, advantages: Float64Array.from(advantages), samplerLogprobs: Float64Array.from(samplerLogprobs) });
        };
        const stats = await model.accumulate({ tokens, segmentStarts, lossMask, advantages, samplerLogprobs }, { name: lossName }, normalizer);
        assert.ok(Math.abs(stats.loss - refLoss()) < 1e-5 * Math.max(1, Math.abs(refLoss())), `loss ${stats.loss} vs ${refLoss()}`);
        assert.equal(stats.lossTokens, 10);
        assert.equal(stats.maskedTokens, lossName === "rl" ? 2 : 0);

        const grads = model.getGrads();
        const rand = mulberry32(7);
        for (const e of model.tensors()) {
          const w = W.get(e.name)!;
          const idx = [...new Set(Array.from({ length: Math.min(e.size, 10) }, () => Math.floor(rand() * e.size)))];
          const h = 1e-5;
          const num = idx.map((i) => {
            const o = w[i];
            w[i] = o + h;
            const a = refLoss();
            w[i] = o - h;
            const b = refLoss();
            w[i] = o;
            return (a - b) / (2 * h);
          });
          const got = idx.map((i) => grads[e.offset + i]);
          // The scale of each tensor's whole gradient bounds the acceptable error of its sampled entries.
          const scale = Math.max(...Array.from(grads.subarray(e.offset, e.offset + e.size), Math.abs));
          for (let j = 0; j < idx.length; j++) {
            assert.ok(
              Math.abs(got[j] - num[j]) <= 2e-4 * scale + 1e-6,
              `${e.name}[${idx[j]}]: analytic ${got[j]} vs numeric ${num[j]} (tensor grad scale ${scale})`,
            );
          }
        }
        model.dispose();
      });
    }
  }
}
