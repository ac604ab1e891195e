// Packing several sequences into one row (segments, positions restarting, no cross-segment attention) must
// give the same loss and gradients as running each sequence alone.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel, type LossSpec } from "../../kernels/index.js";
import { assertClose, mulberry32, randInts, tinyConfig } from "./helpers.js";

const cfg = tinyConfig({ attentionBias: true, tieWordEmbeddings: false });
const seqs = [randInts(9, 1, 37), randInts(5, 2, 37), randInts(14, 3, 37)];

function seqBatch(tokens: Int32Array, seed: number) {
  const r = mulberry32(seed);
  const lossMask = Uint8Array.from(tokens, (_, t) => (t > 0 && r() < 0.8 ? 1 : 0));
  const advantages = Float32Array.from(tokens, () => r() * 2 - 1);
  const samplerLogprobs = Float32Array.from(tokens, () => -3.6 + (r() - 0.5) * 0.4);
  return { tokens, segmentStarts: Int32Array.of(0), lossMask, advantages, samplerLogprobs };
}

function concat<T extends Int32Array | Uint8Array | Float32Array>(parts: T[], make: (n: number) => T): T {
  const out = make(parts.reduce((a, p) => a + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p as never, o);
    o += p.length;
  }
  return out;
}

for (const loss of [{ name: "rl" }, { name: "sft" }, { name: "ppo_clip" }] as LossSpec[]) {
  test(`packed row == sequences alone (${loss.name}): loss, stats and gradients`, async () => {
    const model = PolicyModel.create(cfg, { seed: 4, threads: 2 });
    const batches = seqs.map((s, i) => seqBatch(s, 10 + i));
    const normalizer = batches.reduce((a, b) => a + b.lossMask.reduce((x, y) => x + y, 0), 0);
    let aloneLoss = 0,
      aloneEntropy = 0,
      aloneLogp = 0;
    for (const b of batches) {
      const s = await model.accumulate(b, loss, normalizer);
      aloneLoss += s.loss;
      aloneEntropy += s.entropySum;
      aloneLogp += s.logpSum;
    }
    const aloneGrads = model.getGrads();
    model.zeroGrad();
    const packed = {
      tokens: concat(
        batches.map((b) => b.tokens),
        (n) => new Int32Array(n),
      ),
      segmentStarts: Int32Array.from([0, seqs[0].length, seqs[0].length + seqs[1].length]),
      lossMask: concat(
        batches.map((b) => b.lossMask),
        (n) => new Uint8Array(n),
      ),
      advantages: concat(
        batches.map((b) => b.advantages),
        (n) => new Float32Array(n),
      ),
      samplerLogprobs: concat(
        batches.map((b) => b.samplerLogprobs),
        (n) => new Float32Array(n),
      ),
    };
    const s = await model.accumulate(packed, loss, normalizer);
    assert.equal(s.lossTokens, normalizer);
    assert.ok(Math.abs(s.loss - aloneLoss) < 1e-6 * Math.max(1, Math.abs(aloneLoss)), `loss ${s.loss} vs ${aloneLoss}`);
    assert.ok(Math.abs(s.entropySum - aloneEntropy) < 1e-5 * aloneEntropy);
    assert.ok(Math.abs(s.logpSum - aloneLogp) < 1e-5 * Math.abs(aloneLogp));
    assertClose(model.getGrads(), aloneGrads, "packed vs alone grads", 1e-5, 1e-9);
    model.dispose();
  });
}
