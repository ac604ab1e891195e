// KV-cache generation: the logits each token was sampled from equal a full forward over the same sequence,
// the returned logprobs are the sampled distribution's (temperature / top-k / top-p renormalised), stop rules,
// and per-sequence seeding that makes a sequence's output independent of its batch and of the thread count.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel, type GenerateResult } from "../../kernels/index.js";
import { randomWeights } from "../reference/llama-f64.js";
import { flatParams, tinyConfig } from "./helpers.js";

const cfg = tinyConfig({ attentionBias: true, tieWordEmbeddings: false, maxPositionEmbeddings: 40 });

function makeModel(threads = 2): PolicyModel {
  const m = PolicyModel.create(cfg, { seed: 3, threads });
  // Strong random weights give peaked, position-dependent distributions (a harder test than the 0.02 init).
  m.setParams(flatParams(m, randomWeights(cfg, 11)));
  return m;
}

const prompts = [Int32Array.from([1, 2, 3]), Int32Array.from([7]), Int32Array.from([30, 31, 32, 33, 34, 35, 36, 0, 4])];

function logSoftmax(z: Float32Array, off: number, V: number): Float64Array {
  let m = -Infinity;
  for (let i = 0; i < V; i++) m = Math.max(m, z[off + i]);
  let s = 0;
  for (let i = 0; i < V; i++) s += Math.exp(z[off + i] - m);
  const l = m + Math.log(s);
  return Float64Array.from({ length: V }, (_, i) => z[off + i] - l);
}

async function checkAgainstForward(model: PolicyModel, prompt: Int32Array, r: GenerateResult): Promise<void> {
  const V = cfg.vocabSize;
  const n = r.tokens.length;
  assert.ok(n > 0);
  const seq = new Int32Array(prompt.length + n - 1);
  seq.set(prompt);
  seq.set(r.tokens.subarray(0, n - 1), prompt.length);
  const logits = await model.forward({ tokens: seq, segmentStarts: Int32Array.of(0) });
  for (let k = 0; k < n; k++) {
    const row = prompt.length - 1 + k;
    let scale = 0,
      worst = 0;
    for (let j = 0; j < V; j++) {
      scale = Math.max(scale, Math.abs(logits[row * V + j]));
      worst = Math.max(worst, Math.abs(logits[row * V + j] - r.stepLogits![k * V + j]));
    }
    assert.ok(worst <= 1e-5 * scale, `step ${k}: KV-cache logits differ from the full forward by ${worst} (scale ${scale})`);
    const lp = logSoftmax(logits, row * V, V)[r.tokens[k]];
    assert.ok(Math.abs(lp - r.policyLogprobs[k]) < 1e-5, `step ${k}: policy logprob ${r.policyLogprobs[k]} vs forward ${lp}`);
  }
}

test("KV-cache decode gives the same logits as a full forward (sampling, temperature 1)", async () => {
  const model = makeModel();
  const res = await model.generate({ prompts, maxNewTokens: 12, temperature: 1, seed: 5, returnLogits: true });
  assert.equal(res.length, prompts.length);
  for (let i = 0; i < prompts.length; i++) {
    assert.equal(res[i].stopReason, "length");
    assert.equal(res[i].tokens.length, 12);
    await checkAgainstForward(model, prompts[i], res[i]);
    // At temperature 1 with no top-k/top-p the sampling distribution is the policy itself.
    for (let k = 0; k < 12; k++) assert.ok(Math.abs(res[i].logprobs[k] - res[i].policyLogprobs[k]) < 1e-5);
  }
  model.dispose();
});

test("greedy decode (temperature 0) picks the argmax, reports logprob 0 under its point-mass distribution", async () => {
  const model = makeModel();
  const [r] = await model.generate({ prompts: [prompts[0]], maxNewTokens: 8, temperature: 0, returnLogits: true });
  const V = cfg.vocabSize;
  for (let k = 0; k < 8; k++) {
    const row = r.stepLogits!.subarray(k * V, (k + 1) * V);
    assert.equal(r.tokens[k], row.indexOf(Math.max(...row)));
    assert.equal(r.logprobs[k], 0);
    assert.ok(r.policyLogprobs[k] < 0);
  }
  await checkAgainstForward(model, prompts[0], r);
  model.dispose();
});

/** Every sampled token lies in the kept set recomputed here in float64, with the renormalised logprob. */
function checkKeptSet(res: GenerateResult[], V: number, temperature: number, topK: number, topP: number): number {
  let widest = 0;
  for (const r of res) {
    for (let k = 0; k < r.tokens.length; k++) {
      const z = r.stepLogits!.subarray(k * V, (k + 1) * V);
      const order = Array.from({ length: V }, (_, i) => i).sort((a, b) => z[b] - z[a] || a - b);
      let kept = topK > 0 ? order.slice(0, topK) : order;
      const w = kept.map((i) => Math.exp((z[i] - z[order[0]]) / temperature));
      const Z = w.reduce((a, b) => a + b, 0);
      if (topP < 1) {
        let cum = 0,
          n = 0;
        while (n < kept.length) {
          cum += w[n++];
          if (cum >= topP * Z) break;
        }
        kept = kept.slice(0, n);
      }
      widest = Math.max(widest, kept.length);
      const pos = kept.indexOf(r.tokens[k]);
      assert.ok(pos >= 0, `token ${r.tokens[k]} outside the kept set (T=${temperature}, k=${topK}, p=${topP})`);
      const Zk = kept.reduce((a, i) => a + Math.exp((z[i] - z[order[0]]) / temperature), 0);
      const want = (z[r.tokens[k]] - z[order[0]]) / temperature - Math.log(Zk);
      assert.ok(Math.abs(r.logprobs[k] - want) < 1e-4, `sampled logprob ${r.logprobs[k]} vs ${want}`);
    }
  }
  return widest;
}

test("temperature, top-k and top-p: sampled tokens stay in the kept set; logprobs are the renormalised distribution's", async () => {
  const model = makeModel();
  for (const [temperature, topK, topP] of [
    [0.7, 5, 1],
    [1.3, 0, 0.6],
    [0.9, 8, 0.8],
  ] as const) {
    const res = await model.generate({ prompts, maxNewTokens: 10, temperature, topK, topP, seed: 9, returnLogits: true });
    checkKeptSet(res, cfg.vocabSize, temperature, topK, topP);
  }
  model.dispose();
});

test("top-p over a large vocabulary (the ranked window grows past its first 256 ids) keeps exactly the nucleus", async () => {
  const big = tinyConfig({ vocabSize: 3001, maxPositionEmbeddings: 40 });
  const model = PolicyModel.create(big, { seed: 3, threads: 2 });
  model.setParams(flatParams(model, randomWeights(big, 5)));
  let widest = 0;
  for (const [temperature, topP] of [
    [1, 0.9],
    [2.5, 0.95],
    [0.8, 0.3],
  ] as const) {
    const res = await model.generate({ prompts, maxNewTokens: 6, temperature, topP, seed: 2, returnLogits: true });
    widest = Math.max(widest, checkKeptSet(res, big.vocabSize, temperature, 0, topP));
  }
  assert.ok(widest > 256, `some nucleus needed more than the first window (widest ${widest})`);
  model.dispose();
});

test("vocabLimit: ids past it are never drawn; logprobs are normalised over [0, vocabLimit); the same stream below it", async () => {
  const model = makeModel();
  const V = cfg.vocabSize;
  const limit = Math.floor(V * 0.6);
  // High temperature spreads the mass, so without the limit ids past it do come up (the test can fail).
  const free = await model.generate({ prompts, maxNewTokens: 20, temperature: 2, seed: 4 });
  assert.ok(
    free.some((r) => [...r.tokens].some((t) => t >= limit)),
    "unlimited sampling reaches the tail",
  );
  const res = await model.generate({ prompts, maxNewTokens: 20, temperature: 2, seed: 4, returnLogits: true, vocabLimit: limit });
  for (const r of res) {
    for (let k = 0; k < r.tokens.length; k++) {
      assert.ok(r.tokens[k] < limit, `token ${r.tokens[k]} >= vocabLimit ${limit}`);
      const z = r.stepLogits!.subarray(k * V, k * V + limit);
      const lsm = logSoftmax(z, 0, limit);
      assert.ok(Math.abs(r.policyLogprobs[k] - lsm[r.tokens[k]]) < 1e-5, "policy logprob over the allowed ids");
      const zt = Float32Array.from(z, (x) => x / 2);
      assert.ok(Math.abs(r.logprobs[k] - logSoftmax(zt, 0, limit)[r.tokens[k]]) < 1e-4, "sampled logprob over the allowed ids");
    }
  }
  const [greedy] = await model.generate({ prompts: [prompts[0]], maxNewTokens: 6, temperature: 0, returnLogits: true, vocabLimit: limit });
  for (let k = 0; k < greedy.tokens.length; k++) {
    const row = greedy.stepLogits!.subarray(k * V, k * V + limit);
    assert.equal(greedy.tokens[k], row.indexOf(Math.max(...row)), "greedy takes the argmax of the allowed ids");
  }
  // vocabLimit = vocab changes nothing.
  const same = await model.generate({ prompts, maxNewTokens: 20, temperature: 2, seed: 4, vocabLimit: V });
  assert.deepEqual(
    same.map((r) => [...r.tokens]),
    free.map((r) => [...r.tokens]),
  );
  await assert.rejects(model.generate({ prompts, maxNewTokens: 2, vocabLimit: V + 1 }), /vocabLimit/);
  await assert.rejects(model.generate({ prompts, maxNewTokens: 2, vocabLimit: 0 }), /vocabLimit/);
  model.dispose();
});

test("stop rules: eos (kept in the output), stop sequences, length, context", async () => {
  const model = makeModel();
  const [greedy] = await model.generate({ prompts: [prompts[0]], maxNewTokens: 6, temperature: 0 });
  const eos = greedy.tokens[2];
  const firstEos = greedy.tokens.indexOf(eos);
  const [e] = await model.generate({ prompts: [prompts[0]], maxNewTokens: 6, temperature: 0, eosTokenId: [36, eos].filter((x, i, a) => a.indexOf(x) === i) });
  const cut = Math.min(firstEos, ...[greedy.tokens.indexOf(36)].filter((i) => i >= 0));
  assert.equal(e.stopReason, "eos");
  assert.deepEqual([...e.tokens], [...greedy.tokens.subarray(0, cut + 1)]);
  const [s] = await model.generate({
    prompts: [prompts[0]],
    maxNewTokens: 6,
    temperature: 0,
    stopSequences: [greedy.tokens.slice(3, 5), Int32Array.of(36, 36, 36)],
  });
  assert.equal(s.stopReason, "stop");
  assert.deepEqual([...s.tokens], [...greedy.tokens.subarray(0, 5)]);
  // Context: a 38-token prompt in a 40-position model can grow to 40 tokens: 2 new tokens.
  const long = Int32Array.from({ length: 38 }, (_, i) => i % cfg.vocabSize);
  const [c] = await model.generate({ prompts: [long], maxNewTokens: 10, temperature: 0 });
  assert.equal(c.stopReason, "context");
  assert.equal(c.tokens.length, 2);
  const [full] = await model.generate({ prompts: [Int32Array.from({ length: 40 }, () => 1)], maxNewTokens: 4 });
  assert.equal(full.stopReason, "context");
  assert.equal(full.tokens.length, 0);
  const [none] = await model.generate({ prompts: [prompts[1]], maxNewTokens: 0 });
  assert.equal(none.stopReason, "length");
  assert.equal(none.tokens.length, 0);
  model.dispose();
});

test("a sequence's output does not depend on its batch or on the thread count", async () => {
  const m2 = makeModel(2);
  const m1 = makeModel(1);
  const req = { maxNewTokens: 10, temperature: 1, topP: 0.9 };
  const all = await m2.generate({ ...req, prompts, seeds: [11, 12, 13] });
  const alone = await m2.generate({ ...req, prompts: [prompts[2]], seeds: [13] });
  assert.deepEqual(alone[0], all[2]);
  const oneThread = await m1.generate({ ...req, prompts, seeds: [11, 12, 13] });
  assert.deepEqual(oneThread, all);
  // And different seeds do change it.
  const other = await m2.generate({ ...req, prompts, seeds: [21, 22, 23] });
  assert.notDeepEqual(
    other.map((r) => [...r.tokens]),
    all.map((r) => [...r.tokens]),
  );
  m1.dispose();
  m2.dispose();
});
