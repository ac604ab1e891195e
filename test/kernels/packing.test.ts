import { test } from "node:test";
import assert from "node:assert/strict";
import { packSamples } from "../../kernels/packing.js";
import { groupAdvantages } from "../../rl/advantages.js";

const sample = (p: number[], c: number[], mask: number[], adv = 0.5) => ({
  promptIds: p,
  completionIds: c,
  completionMask: mask,
  samplerLogprobs: c.map((_, i) => -0.1 * (i + 1)),
  advantage: adv,
});

test("packing: sequences share rows up to the token budget, per-token arrays align with predicted tokens", () => {
  const r = packSamples([sample([1, 2, 3], [4, 5], [1, 1]), sample([6, 7], [8, 9, 10], [1, 0, 1], -1), sample([11], [12], [1])], 8, 64);
  assert.equal(r.microBatches.length, 2);
  const [a, b] = r.microBatches;
  assert.deepEqual([...a!.tokens], [1, 2, 3, 4, 5]);
  assert.deepEqual([...a!.segmentStarts], [0]);
  assert.deepEqual([...a!.lossMask], [0, 0, 0, 1, 1]);
  assert.deepEqual([...a!.advantages], [0, 0, 0, 0.5, 0.5]);
  assert.deepEqual([...b!.tokens], [6, 7, 8, 9, 10, 11, 12]);
  assert.deepEqual([...b!.segmentStarts], [0, 5]);
  assert.deepEqual([...b!.lossMask], [0, 0, 1, 0, 1, 0, 1]);
  assert.ok(Math.abs(b!.samplerLogprobs[4]! - -0.3) < 1e-6);
  assert.equal(r.lossTokens, 2 + 2 + 1);
  assert.equal(r.totalTokens, 12);
});

test("packing: a sequence past the context is cut and the cut is counted; a lone long sequence gets its own row", () => {
  const r = packSamples([sample([1, 2], [3, 4, 5, 6], [1, 1, 1, 1]), sample([1], [2], [1])], 3, 4);
  assert.equal(r.truncatedTokens, 2);
  assert.deepEqual([...r.microBatches[0]!.tokens], [1, 2, 3, 4]);
  assert.equal(r.microBatches.length, 2);
});

test("group advantages: centred, optionally std-normalised, zero for uniform groups", () => {
  assert.deepEqual(groupAdvantages([1, 0, 0, 1], false), [0.5, -0.5, -0.5, 0.5]);
  assert.deepEqual(groupAdvantages([1, 0, 0, 1], true), [1, -1, -1, 1]);
  assert.deepEqual(groupAdvantages([1, 1, 1], true), [0, 0, 0]);
  assert.deepEqual(groupAdvantages([], false), []);
});

test("packing, sharePrefix: families follow the longest shared prefix, not a template prefix every row has", () => {
  const template = [1, 2, 3];
  const group = (g: number) =>
    Array.from({ length: 4 }, (_, i) => sample([...template, ...Array.from({ length: 10 }, (_, k) => 10 + g * 10 + k)], [30 + i, 31], [1, 1]));
  // Rows of the two groups interleaved: families are found whatever the order, and the layout keeps first-seen order.
  const rows = group(0).flatMap((r, i) => [r, group(1)[i]!]);
  const r = packSamples(rows, 4096, 64, { sharePrefix: true });
  const mb = r.microBatches[0]!;
  assert.deepEqual([...mb.segmentParents!], [-1, 0, 0, 0, 0, -1, 5, 5, 5, 5]);
  assert.equal(mb.segmentStarts[1], 13, "the prefix is template + prompt");
  assert.equal(r.totalTokens, 2 * (13 + 4 * 2));
  assert.equal(r.unpackedTokens, 8 * 15);
  // Rows that share only the template: one family of the template (3 tokens saved per extra row) beats nothing.
  const loose = packSamples([sample([...template, 40], [41], [1]), sample([...template, 50], [51], [1])], 4096, 64, { sharePrefix: true });
  assert.deepEqual([...loose.microBatches[0]!.segmentParents!], [-1, 0, 0]);
  assert.equal(loose.totalTokens, 3 + 2 * 2);
  // Off by option: no parents, every sample whole.
  assert.equal(packSamples(rows, 4096, 64).microBatches[0]!.segmentParents, undefined);
});
