// `rollstream bench lora`: one RL-shaped optimizer step (forward + backward over a packed micro-batch, then the
// update) with LoRA rank 8 on every projection against full fine-tuning of the same model, same batch, alternating
// rounds, on the demo shape and a ~21 M-parameter one; what each keeps for the optimizer (trainable values, AdamW
// moments); the values a LoRA step moves between JS and the model (the adapted tensors' gradient and merged weights);
// and the peak RSS of a process that runs only one of the two (this file re-run as a child per variant, same steps).
// Last line: one JSON object.
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
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
  lora?.beforeMicro(model, lora.step, 0);
  await model.accumulate(batch, { name: "rl" }, batch.tokens.length);
  if (lora) lora.stepModel(model, OPT);
  else await model.step(OPT);
  return performance.now() - t0;
}

const CHILD_FLAG = "--lora-bench-rss-child";

/** Peak RSS (MiB) of a fresh process that creates one model and runs `steps` steps of one variant. */
function peakRssMiB(shapeName: string, variant: "full" | "lora", tokens: number, steps: number, threads: number | undefined): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = fork(fileURLToPath(import.meta.url), [CHILD_FLAG, shapeName, variant, String(tokens), String(steps), String(threads ?? 0)], {
      stdio: ["ignore", "ignore", "inherit", "ipc"],
    });
    child.once("message", (m) => resolve(Number(m)));
    child.once("error", reject);
    child.once("exit", (code) => code !== 0 && reject(new Error(`bench lora: the ${variant} RSS child exited with ${code}`)));
  });
}

async function rssChild(args: string[]): Promise<void> {
  const [shapeName, variant, tokens, steps, threads] = args as [string, string, string, string, string];
  const cfg = shapeName === "demo" ? DEMO_CONFIG : M21;
  const model = PolicyModel.create(cfg, { seed: 1, threads: Number(threads) || undefined });
  let lora: LoraAdapters | null = null;
  if (variant === "lora") {
    const settings = LoraSchema.parse({ rank: 8, alpha: 16, targetModules: ["all-linear"] });
    lora = new LoraAdapters(settings, loraTargets(model.tensors(), settings), model.getParams());
    lora.load(model);
  }
  const batch = batchOf(cfg, Number(tokens));
  for (let i = 0; i < Number(steps); i++) await stepMs(model, lora, batch);
  model.dispose();
  process.send?.(process.resourceUsage().maxRSS / 1024, () => process.exit(0));
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function shape(name: string, cfg: ModelConfig, tokens: number, rounds: number, threads: number | undefined) {
  const full = PolicyModel.create(cfg, { seed: 1, threads });
  const adapted = PolicyModel.create(cfg, { seed: 1, threads });
  const dropped = PolicyModel.create(cfg, { seed: 1, threads });
  const settings = LoraSchema.parse({ rank: 8, alpha: 16, targetModules: ["all-linear"] });
  const lora = new LoraAdapters(settings, loraTargets(adapted.tensors(), settings), adapted.getParams());
  lora.load(adapted);
  // The same adapters with PEFT's dropout: the kernels' correction on every projection.
  const withDropout = new LoraAdapters({ ...settings, dropout: 0.05 }, lora.targets, dropped.getParams(), Float32Array.from(lora.params));
  withDropout.load(dropped);
  const batch = batchOf(cfg, tokens);
  const t = { full: [] as number[], lora: [] as number[], dropout: [] as number[] };
  try {
    await stepMs(full, null, batch); // warm-up: the sgemm dispatcher measures each shape class once
    await stepMs(adapted, lora, batch);
    await stepMs(dropped, withDropout, batch);
    for (let r = 0; r < rounds; r++) {
      // Alternating order: this machine's speed drifts.
      if (r % 2 === 0) t.full.push(await stepMs(full, null, batch));
      t.lora.push(await stepMs(adapted, lora, batch));
      t.dropout.push(await stepMs(dropped, withDropout, batch));
      if (r % 2 === 1) t.full.push(await stepMs(full, null, batch));
    }
  } finally {
    full.dispose();
    adapted.dispose();
    dropped.dispose();
  }
  const fullMs = median(t.full);
  const loraMs = median(t.lora);
  const dropoutMs = median(t.dropout);
  const trainable = lora.params.length;
  const rssFull = await peakRssMiB(name, "full", tokens, 3, threads);
  const rssLora = await peakRssMiB(name, "lora", tokens, 3, threads);
  // What JS holds for LoRA: the adapted tensors' base, the adapters and their moments (before: the whole base).
  const held = 4 * (lora.ranges.total + 3 * trainable);
  const moved = 2 * 4 * lora.ranges.total; // per step: the adapted tensors' gradient read, their merged weights written
  const line = `${name.padEnd(6)} ${String(full.numParams).padStart(10)} params  full ${fullMs.toFixed(1).padStart(8)} ms/step  lora ${loraMs.toFixed(1).padStart(8)} ms/step  (x${(loraMs / fullMs).toFixed(2)})  lora+dropout 0.05 ${dropoutMs.toFixed(1)} ms/step (x${(dropoutMs / loraMs).toFixed(2)} of lora)  trainable ${(100 * (trainable / full.numParams)).toFixed(1)}%  moments ${mib(8 * full.numParams)} -> ${mib(8 * trainable)} MiB  peak RSS full ${rssFull.toFixed(0)} MiB, lora ${rssLora.toFixed(0)} MiB (x${(rssLora / rssFull).toFixed(2)})  LoRA JS-held ${mib(held)} MiB (whole-base copy: ${mib(4 * (full.numParams + 3 * trainable))}), moved/step ${mib(moved)} MiB (whole model: ${mib(3 * 4 * full.numParams)})`;
  console.log(line);
  return { fullMs, loraMs, dropoutMs, ratio: loraMs / fullMs, params: full.numParams, trainable, rssFull, rssLora, held, moved };
}

const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(2);

export async function runLoraBench(opts: { quick?: boolean; threads?: number } = {}): Promise<Record<string, number>> {
  const rounds = opts.quick ? 2 : 6;
  console.log(`one RL step over ${opts.quick ? 512 : 2048} tokens, LoRA rank 8 on every projection vs full fine-tuning, median of ${rounds}`);
  const demo = await shape("demo", DEMO_CONFIG, opts.quick ? 512 : 2048, rounds, opts.threads);
  const big = await shape("21M", M21, opts.quick ? 512 : 2048, rounds, opts.threads);
  console.log(
    "LoRA's adapters are merged into the weights: the forward and backward are the full model's, plus the projection of the adapted tensors' gradient onto the adapters and the merge (with dropout: plus the kernels' rank-r correction on every projection, forward and backward), moved through rs_model_buffer_ranges (only those tensors). Moments: what the step updates and a checkpoint holds; the native model still allocates its own full moments and gradient buffer (unused moments under LoRA: making them lazy is the next memory step). Peak RSS: one process per variant, 3 steps",
  );
  const out = {
    demoFullMs: demo.fullMs,
    demoLoraMs: demo.loraMs,
    demoRatio: demo.ratio,
    demoDropoutMs: demo.dropoutMs,
    m21FullMs: big.fullMs,
    m21LoraMs: big.loraMs,
    m21Ratio: big.ratio,
    m21DropoutMs: big.dropoutMs,
    m21DropoutOverLora: big.dropoutMs / big.loraMs,
    m21TrainableFraction: big.trainable / big.params,
    m21MomentsBytesFull: 8 * big.params,
    m21MomentsBytesLora: 8 * big.trainable,
    m21PeakRssFullMiB: big.rssFull,
    m21PeakRssLoraMiB: big.rssLora,
    m21PeakRssRatio: big.rssLora / big.rssFull,
    m21LoraHeldBytes: big.held,
    m21LoraMovedBytesPerStep: big.moved,
  };
  console.log(JSON.stringify(out));
  return out;
}

if (process.argv[2] === CHILD_FLAG) await rssChild(process.argv.slice(3));
