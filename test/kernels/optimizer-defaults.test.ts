// AdamW defaults have one home, kernels/optimizer.ts OptimizerSchema: PolicyModel.step and the stand-alone
// adamw kernel fill left-out settings from it (they once carried beta2 0.999 against the config's 0.95).
import { test } from "node:test";
import assert from "node:assert/strict";
import { kernels, PolicyModel } from "../../kernels/index.js";
import { OptimizerSchema } from "../../kernels/optimizer.js";
import { randF32, randInts, tinyConfig } from "./helpers.js";

const cfg = tinyConfig({ hiddenSize: 32, intermediateSize: 48 });
const D = OptimizerSchema.parse({});

async function paramsAfterTwoSteps(opt: Parameters<PolicyModel["step"]>[0]): Promise<Float32Array> {
  const model = PolicyModel.create(cfg, { seed: 5, threads: 1 });
  const tokens = randInts(20, 3, cfg.vocabSize);
  const lossMask = Uint8Array.from(tokens, (_, t) => (t === 0 ? 0 : 1));
  for (let s = 0; s < 2; s++) {
    await model.accumulate({ tokens, segmentStarts: Int32Array.of(0), lossMask }, { name: "sft" }, 19);
    await model.step(opt);
  }
  const p = model.getParams();
  model.dispose();
  return p;
}

test("PolicyModel.step's defaults are OptimizerSchema's", async () => {
  const { beta1, beta2, eps, weightDecay, maxGradNorm } = D;
  const implicit = await paramsAfterTwoSteps({ lr: 1e-2 });
  assert.deepEqual(implicit, await paramsAfterTwoSteps({ lr: 1e-2, beta1, beta2, eps, weightDecay, maxGradNorm }));
  // Control: the comparison sees a different beta2.
  assert.notDeepEqual(implicit, await paramsAfterTwoSteps({ lr: 1e-2, beta2: 0.999 }));
});

test("kernels.adamw's defaults are OptimizerSchema's", () => {
  const run = (o: Parameters<typeof kernels.adamw>[4]) => {
    const p = randF32(64, 1),
      g = randF32(64, 2),
      m = randF32(64, 3).map(Math.abs),
      v = randF32(64, 4).map(Math.abs);
    kernels.adamw(p, g, m, v, o);
    return p;
  };
  const implicit = run({ lr: 0.01, step: 3 });
  assert.deepEqual(implicit, run({ lr: 0.01, step: 3, beta1: D.beta1, beta2: D.beta2, eps: D.eps, weightDecay: D.weightDecay }));
  assert.notDeepEqual(implicit, run({ lr: 0.01, step: 3, beta2: 0.999 }));
});
