// Learner benchmark: whole optimizer steps (pack, forward + backward of every micro-batch, AdamW) on groups of
// G = 8 completions of one prompt, with group-prefix packing (each prompt laid out once, its completions attending
// to it) against every sample packed whole, in the same run, at prompt:completion ratios 1:1, 4:1 and 1:4.
// tokens/s counts the tokens the kernels compute; effective tokens/s counts the tokens the loss covers (the
// completions), the figure that says how fast the learner learns. The two modes alternate in rounds so a drift in
// this shared machine's speed lands on both. Prints a table; the last line is one JSON object.
import { availableParallelism } from "node:os";
import { PolicyModel } from "../kernels/index.js";
import type { ModelConfig } from "../kernels/model-config.js";
import { parseLossSpec } from "../kernels/loss-spec.js";
import { packSamples, type TrainSample } from "../kernels/packing.js";
import { trainOnSamples } from "../kernels/train-step.js";
import { runRanksBench } from "./learner-ranks.js";

const G = 8;

/** A small decoder with a context long enough for the ratios (the demo's 64 positions are not). */
export function benchModel(quick: boolean): ModelConfig {
  return {
    vocabSize: 512,
    hiddenSize: quick ? 64 : 192,
    intermediateSize: quick ? 192 : 512,
    numLayers: quick ? 2 : 4,
    numHeads: 4,
    numKvHeads: 2,
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
    tieWordEmbeddings: true,
    maxPositionEmbeddings: 1024,
    attentionBias: false,
  };
}

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

/** `groups` groups of G samples: one prompt of P tokens each, G completions of R tokens, every completion token trained. */
export function groupSamples(groups: number, P: number, R: number, V: number, seed: number): TrainSample[] {
  const r = rng(seed);
  const ids = (n: number) => Int32Array.from({ length: n }, () => Math.floor(r() * V));
  const out: TrainSample[] = [];
  for (let g = 0; g < groups; g++) {
    const prompt = ids(P);
    for (let i = 0; i < G; i++) {
      out.push({
        promptIds: prompt,
        completionIds: ids(R),
        completionMask: new Uint8Array(R).fill(1),
        samplerLogprobs: Float32Array.from({ length: R }, () => -Math.log(V) + (r() - 0.5) * 0.2),
        advantage: (i % 2 ? 1 : -1) * (0.5 + r()),
      });
    }
  }
  return out;
}

interface Rate {
  tokens: number;
  lossTokens: number;
  seconds: number;
  steps: number;
  losses: number[];
}

const OPT = { lr: 1e-4, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, schedule: "constant", warmupSteps: 0, minLr: 0 } as const;

/** Steps for at least `seconds` on a fresh model (same seed in both modes, so their losses can be compared). */
async function timeSteps(cfg: ModelConfig, threads: number, samples: TrainSample[], sharePrefix: boolean, seconds: number, into: Rate): Promise<void> {
  const model = PolicyModel.create(cfg, { seed: 7, threads });
  const spec = parseLossSpec({ name: "rl" });
  try {
    await trainOnSamples(model, packSamples(samples, 4096, cfg.maxPositionEmbeddings, { sharePrefix }), spec, OPT as never); // warm-up
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000) {
      const s0 = performance.now();
      const packed = packSamples(samples, 4096, cfg.maxPositionEmbeddings, { sharePrefix });
      const r = await trainOnSamples(model, packed, spec, OPT as never);
      into.seconds += (performance.now() - s0) / 1000;
      into.tokens += packed.totalTokens;
      into.lossTokens += r.lossTokens;
      into.steps++;
      if (into.losses.length < 1) into.losses.push(r.loss);
    }
  } finally {
    model.dispose();
  }
}

export async function runLearnerBench(opts: { threads?: number; quick?: boolean; seconds?: number } = {}): Promise<Record<string, number>> {
  const quick = opts.quick === true;
  const threads = opts.threads ?? Math.min(2, availableParallelism());
  const cfg = benchModel(quick);
  const unit = quick ? 16 : 64; // tokens per ratio part: 1:1 = 5u:5u, 4:1 = 8u:2u, 1:4 = 2u:8u
  const ratios: Array<[string, number, number]> = [
    ["1:1", 5 * unit, 5 * unit],
    ["4:1", 8 * unit, 2 * unit],
    ["1:4", 2 * unit, 8 * unit],
  ];
  const seconds = opts.seconds ?? (quick ? 0.5 : 3);
  const result: Record<string, number> = { threads, group_size: G, hidden: cfg.hiddenSize, layers: cfg.numLayers };
  const lines: string[] = [
    `model: ${cfg.numLayers} layers, d ${cfg.hiddenSize}, vocab ${cfg.vocabSize}; ${threads} threads; steps of 2 groups of ${G}, rl loss + AdamW`,
    `${"P:R".padEnd(6)}${"tokens".padStart(8)}${"mode".padStart(10)}${"tok/s".padStart(10)}${"eff tok/s".padStart(11)}${"step ms".padStart(9)}${"eff gain".padStart(10)}`,
  ];
  for (const [name, P, R] of ratios) {
    const samples = groupSamples(2, P, R, cfg.vocabSize, P * 31 + R);
    const rates = {
      whole: { tokens: 0, lossTokens: 0, seconds: 0, steps: 0, losses: [] } as Rate,
      shared: { tokens: 0, lossTokens: 0, seconds: 0, steps: 0, losses: [] } as Rate,
    };
    // Two rounds, the order swapped in the second.
    for (const order of [
      ["whole", "shared"],
      ["shared", "whole"],
    ] as const) {
      for (const mode of order) await timeSteps(cfg, threads, samples, mode === "shared", seconds / 2, rates[mode]);
    }
    const eff = (r: Rate) => r.lossTokens / r.seconds;
    const gain = eff(rates.shared) / eff(rates.whole);
    for (const mode of ["whole", "shared"] as const) {
      const r = rates[mode];
      lines.push(
        `${name.padEnd(6)}${String(P + R).padStart(8)}${mode.padStart(10)}${(r.tokens / r.seconds).toFixed(0).padStart(10)}${eff(r).toFixed(0).padStart(11)}` +
          `${((r.seconds / r.steps) * 1000).toFixed(0).padStart(9)}${(mode === "shared" ? `${gain.toFixed(2)}x` : "1.00x").padStart(10)}`,
      );
    }
    const key = name.replace(":", "_");
    result[`tokens_per_s_${key}_whole`] = rates.whole.tokens / rates.whole.seconds;
    result[`tokens_per_s_${key}_shared`] = rates.shared.tokens / rates.shared.seconds;
    result[`effective_tokens_per_s_${key}_whole`] = eff(rates.whole);
    result[`effective_tokens_per_s_${key}_shared`] = eff(rates.shared);
    result[`effective_gain_${key}`] = gain;
    // The same first step in both modes (same model seed and samples): the packing changes the cost, not the math.
    result[`first_loss_rel_diff_${key}`] = Math.abs(rates.shared.losses[0]! - rates.whole.losses[0]!) / Math.max(1e-12, Math.abs(rates.whole.losses[0]!));
  }
  for (const l of lines) console.log(l);
  console.log(`effective-token gain of group-prefix packing at 4:1, G = ${G}: ${result.effective_gain_4_1!.toFixed(2)}x (target >= 1.8x)`);
  // Learner ranks: 1 vs 2 on this machine, and a model of N (bench/learner-ranks.ts).
  for (const l of await runRanksBench({ quick, seconds }, result)) console.log(l);
  console.log(JSON.stringify(result));
  return result;
}
