import { test } from "node:test";
import assert from "node:assert/strict";
import { lrAt } from "../../kernels/index.js";

test("LR schedules: warmup ramp, cosine and linear decay to the floor, constant", () => {
  const cos = { kind: "cosine" as const, peak: 1e-3, warmupSteps: 10, totalSteps: 110, minLr: 1e-4 };
  assert.equal(lrAt(cos, 0), 1e-4);
  assert.equal(lrAt(cos, 9), 1e-3);
  assert.equal(lrAt(cos, 10), 1e-3);
  assert.ok(Math.abs(lrAt(cos, 60) - 5.5e-4) < 1e-12);
  assert.ok(Math.abs(lrAt(cos, 110) - 1e-4) < 1e-15);
  assert.ok(Math.abs(lrAt(cos, 500) - 1e-4) < 1e-15);
  assert.ok(Math.abs(lrAt({ kind: "linear", peak: 1, totalSteps: 4 }, 1) - 0.75) < 1e-15);
  assert.equal(lrAt({ kind: "constant", peak: 3e-4 }, 1234), 3e-4);
  assert.throws(() => lrAt({ kind: "cosine", peak: 1 }, 0), /needs totalSteps/);
  assert.throws(() => lrAt({ kind: "constant", peak: -1 }, 0), /invalid LR schedule: peak/);
  assert.throws(() => lrAt({ kind: "constant", peak: 1 }, -1), /step must be an integer/);
});
