// The global batch the ZeRO-1 tests train: groups sharing prompts (so group-prefix packing is on too), packed
// into several micro-batches so that two ranks each get some.
import { parseLossSpec } from "../../kernels/loss-spec.js";
import { packSamples, type TrainSample } from "../../kernels/packing.js";
import { mulberry32 } from "../helpers/rng.js";
import { tinyConfig } from "../kernels/helpers.js";

export function fixture() {
  const cfg = tinyConfig({ attentionBias: true, tieWordEmbeddings: false });
  const r = mulberry32(3);
  const ids = (n: number) => Int32Array.from({ length: n }, () => Math.floor(r() * cfg.vocabSize));
  const samples: TrainSample[] = [];
  for (let g = 0; g < 3; g++) {
    const prompt = ids(6 + g);
    for (let i = 0; i < 4; i++) {
      const n = 3 + ((g + i) % 4);
      samples.push({
        promptIds: prompt,
        completionIds: ids(n),
        completionMask: new Uint8Array(n).fill(1),
        samplerLogprobs: Float32Array.from({ length: n }, () => -3.6 + (r() - 0.5) * 0.4),
        advantage: r() * 2 - 1,
      });
    }
  }
  const pack = { microBatchTokens: 24, sharePrefix: true };
  const packed = packSamples(samples, pack.microBatchTokens, cfg.maxPositionEmbeddings, { sharePrefix: pack.sharePrefix });
  const opt = { lr: 2e-2, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.01, maxGradNorm: 0.5 };
  return { cfg, seed: 9, samples, pack, packed, spec: parseLossSpec({ name: "rl" }), opt };
}
