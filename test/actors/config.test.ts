import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadRunConfig, parseRunConfig } from "../../actors/runtime/config.js";
import { learningRate } from "../../kernels/optimizer.js";

test("a minimal config gets every default", () => {
  const c = parseRunConfig({ run: "r", environments: [{ id: "arithmetic" }] });
  assert.equal(c.rl.maxAsyncLevel, 2);
  assert.equal(c.rl.loss.maskLow, 0.125);
  assert.equal(c.rl.loss.maskHigh, 8);
  assert.equal(c.model.vocabSize, 288);
  assert.equal(c.environments[0]!.weight, 1);
  assert.equal(c.sft, undefined);
});

test("a bad config is rejected with every problem listed by path", () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-cfg-"));
  const path = join(dir, "bad.yaml");
  writeFileSync(path, [
    "run: 'has space'",
    "environments: []",
    "model: { hiddenSize: 100, numHeads: 3, numKvHeads: 2 }",
    "rl: { batchSize: 10, groupSize: 4, maxAsyncLevel: -1, sampling: { topP: 2 } }",
    "checkpoint: { interval: 0 }",
  ].join("\n"));
  try {
    loadRunConfig(path);
    assert.fail("accepted a bad config");
  } catch (e) {
    assert.ok(e instanceof ConfigError);
    const text = e.message;
    for (const p of ["run:", "environments:", "rl.maxAsyncLevel:", "rl.sampling.topP:", "checkpoint.interval:"]) {
      assert.ok(text.includes(p), `missing ${p} in\n${text}`);
    }
    assert.ok(e.problems.length >= 5);
  }
  // Cross-field rules are reported once the shapes are valid.
  assert.throws(() => parseRunConfig({ run: "r", environments: [{ id: "a" }], rl: { batchSize: 10, groupSize: 4 } }), /rl\.batchSize: must be a multiple of rl\.groupSize/);
  assert.throws(() => parseRunConfig({ run: "r", environments: [{ id: "a" }], model: { hiddenSize: 100, numHeads: 3 } }), /model\.hiddenSize: must be divisible by numHeads/);
  assert.throws(() => loadRunConfig(join(dir, "missing.yaml")), /cannot read file/);
  writeFileSync(path, "run: [unclosed");
  assert.throws(() => loadRunConfig(path), /not valid YAML/);
});

test("learning-rate schedules: warmup, constant, cosine to minLr", () => {
  const base = { lr: 1, minLr: 0.1, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, maxGradNorm: 1 };
  assert.equal(learningRate({ ...base, schedule: "constant", warmupSteps: 4 }, 0, 10), 0.25);
  assert.equal(learningRate({ ...base, schedule: "constant", warmupSteps: 4 }, 7, 10), 1);
  const cos = { ...base, schedule: "cosine" as const, warmupSteps: 0 };
  assert.equal(learningRate(cos, 0, 10), 1);
  assert.ok(Math.abs(learningRate(cos, 10, 10) - 0.1) < 1e-12);
  assert.ok(learningRate(cos, 5, 10) < 1 && learningRate(cos, 5, 10) > 0.1);
});
