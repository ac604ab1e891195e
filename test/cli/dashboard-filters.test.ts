// The rollout browser's filters and the dead-letter preview, as pure functions: each filter keeps exactly
// the groups it names (checked against a hand-counted list), and a malformed parameter is a one-line error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { groupFilter, payloadPreview } from "../../cli/dashboard/filters.js";
import type { GroupEntry } from "../../cli/dashboard/run-data.js";

const g = (seq: number, step: number, env: string, version: number, rewards: number[] | null): GroupEntry => ({
  seq,
  step,
  env,
  rows: rewards?.length ?? 4,
  policyVersion: version,
  rewardMean: rewards ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null,
  rewardMin: rewards ? Math.min(...rewards) : null,
  rewardMax: rewards ? Math.max(...rewards) : null,
  time: "",
});

const groups = [
  g(1, 0, "a", 0, [0, 0, 0, 0]),
  g(2, 0, "b", 0, [1, 0, 1, 0]),
  g(3, 1, "a", 1, [1, 1, 1, 1]),
  g(4, 2, "a", 1, [1, 0, 0, 0]),
  g(5, 2, "b", 2, null), // stored before the reward headers existed
];

const seqs = (q: Record<string, string>) => {
  const f = groupFilter(q);
  if (typeof f === "string") throw new Error(f);
  return groups.filter(f).map((x) => x.seq);
};

test("no filter keeps every group (the control the others narrow)", () => {
  assert.deepEqual(seqs({}), [1, 2, 3, 4, 5]);
});

test("filters by env, step, step range and policy version", () => {
  assert.deepEqual(seqs({ env: "a" }), [1, 3, 4]);
  assert.deepEqual(seqs({ step: "2" }), [4, 5]);
  assert.deepEqual(seqs({ stepMin: "1", stepMax: "2" }), [3, 4, 5]);
  assert.deepEqual(seqs({ version: "1" }), [3, 4]);
  assert.deepEqual(seqs({ env: "b", version: "0" }), [2]);
});

test("filters by mean reward and by outcome; groups without reward headers never match a reward filter", () => {
  assert.deepEqual(seqs({ minReward: "0.5" }), [2, 3]);
  assert.deepEqual(seqs({ maxReward: "0.25" }), [1, 4]);
  assert.deepEqual(seqs({ outcome: "mixed" }), [2, 4]);
  assert.deepEqual(seqs({ outcome: "uniform" }), [1, 3]);
});

test("a malformed parameter is a one-line error naming it", () => {
  assert.equal(groupFilter({ step: "two" }), 'step must be a number (got "two")');
  assert.equal(groupFilter({ outcome: "some" }), 'outcome must be mixed or uniform (got "some")');
});

test("the payload preview escapes what is not printable and caps what it shows", () => {
  const p = payloadPreview(new Uint8Array([0x68, 0x69, 0x0a, 0x00, 0xff]));
  assert.equal(p.text, "hi\n\\x00\\xff");
  assert.equal(p.hex, "68 69 0a 00 ff");
  assert.equal(p.truncated, false);
  const big = payloadPreview(new Uint8Array(1000).fill(0x41), 512);
  assert.equal(big.text.length, 512);
  assert.equal(big.bytes, 1000);
  assert.equal(big.truncated, true);
});
