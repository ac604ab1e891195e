// `rollstream bench lora`: one RL-shaped optimizer step (forward + backward over a packed micro-batch, then the
// update) with LoRA rank 8 on every projection against full fine-tuning of the same model, same batch, alternating
// rounds, on the demo shape and a ~21 M-parameter one; and what each keeps for the optimizer (trainable values,
// AdamW moments). Last line: one JSON object.
import { PolicyModel } from "../kernels/index.js";
import { LoraAdapters, LoraSchema, loraTargets } from "../kernels/lora.js";
import type { ModelConfig } from "../kernels/model-config.js";
import { DEMO_CONFIG } from "./kernels.js";

const M21: ModelConfig = { ...DEMO_CONFIG, hiddenSize: 512, intermediateSize: 1792, numLayers: 6, numHeads: 8, numKvHeads: 4, maxPositionEmbeddings: 1024 };
const OPT = { lr: 1e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, maxGradNorm: 1 };

function batchOf(cfg: ModelConfig, tokens: number) {
  const ids = Int32Array.from({ length: tokens }, (_, i) => (i * 7919 + 13) % cfg.vocabSize);
  const seqLen = Math.min(cfg.maxPositionEmbeddings, 256);
  const segmentStarts = Int32Array.from({ length: Math.ceil(tokens / seqLen) }, (_, i) => i * seqLen);
  const lossMask = Uint8Array.from(ids, (_, t) => (t % seqLen === 0 ? 0 : 1));
  const advantages = Float32Array.from(ids, (_, t) => ((t >> 5) % 2 ? 0.5 : -0.5));
  const samplerLogprobs = new Float32Array(tokens).fill(-Math.log(cfg.vocabSize));
  return { tokens: ids, segmentStarts, lossMask, advantages, samplerLogprobs };
}

async function stepMs(model: PolicyModel, lora: LoraAdapters | null, batch: ReturnType<typeof batchOf>): Promise<number> {
  const t0 = performance.now();
  await model.accumulate(batch, { name: "rl" }, batch.tokens.length);
  if (lora) lora.stepModel(model, OPT);
  else await model.step(OPT);
  return performance.now() - t0;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function shape(name: string, cfg: ModelConfig, tokens: number, rounds: number, threads: number | undefined) {
  const full = PolicyModel.create(cfg, { seed: 1, threads });
  const adapted = PolicyModel.create(cfg, { seed: 1, threads });
  const settings = LoraSchema.parse({ rank: 8, alpha: 16, targetModules: ["all-linear"] });
  const lora = new LoraAdapters(settings, loraTargets(adapted.tensors(), settings), adapted.getParams());
  adapted.setParams(lora.merged());
  const batch = batchOf(cfg, tokens);
  const t = { full: [] as number[], lora: [] as number[] };
  try {
    await stepMs(full, null, batch); // warm-up: the sgemm dispatcher measures each shape class once
    await stepMs(adapted, lora, batch);
    for (let r = 0; r < rounds; r++) {
      // Alternating order: this machine's speed drifts.
      if (r % 2 === 0) t.full.push(await stepMs(full, null, batch));
      t.lora.push(await stepMs(adapted, lora, batch));
      if (r % 2 === 1) t.full.push(await stepMs(full, null, batch));
    }
  } finally {
    full.dispose();
    adapted.dispose();
  }
  const fullMs = median(t.full);
  const loraMs = median(t.lora);
  const trainable = lora.params.length;
  const line = `${name.padEnd(6)} ${String(full.numParams).padStart(10)} params  full ${fullMs.toFixed(1).padStart(8)} ms/step  lora ${loraMs.toFixed(1).padStart(8)} ms/step  (x${(loraMs / fullMs).toFixed(2)})  trainable ${(100 * (trainable / full.numParams)).toFixed(1)}%  moments ${mib(8 * full.numParams)} -> ${mib(8 * trainable)} MiB`;
  console.log(line);
  return { fullMs, loraMs, ratio: loraMs / fullMs, params: full.numParams, trainable };
}

const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(2);

export async function runLoraBench(opts: { quick?: boolean; threads?: number } = {}): Promise<Record<string, number>> {
  const rounds = opts.quick ? 2 : 6;
  console.log(`one RL step over ${opts.quick ? 512 : 2048} tokens, LoRA rank 8 on every projection vs full fine-tuning, median of ${rounds}`);
  const demo = await shape("demo", DEMO_CONFIG, opts.quick ? 512 : 2048, rounds, opts.threads);
  const big = await shape("21M", M21, opts.quick ? 512 : 2048, rounds, opts.threads);
  console.log(
    "LoRA's adapters are merged into the weights: the forward and backward are the full model's, plus the projection of the gradient onto the adapters and the merge. Moments: what the step updates and a checkpoint holds; the native model still allocates its own full moments and gradient buffer (unused moments under LoRA: making them lazy is the next memory step)",
  );
  const out = {
    demoFullMs: demo.fullMs,
    demoLoraMs: demo.loraMs,
    demoRatio: demo.ratio,
    m21FullMs: big.fullMs,
    m21LoraMs: big.loraMs,
    m21Ratio: big.ratio,
    m21TrainableFraction: big.trainable / big.params,
    m21MomentsBytesFull: 8 * big.params,
    m21MomentsBytesLora: 8 * big.trainable,
  };
  console.log(JSON.stringify(out));
  return out;
}
