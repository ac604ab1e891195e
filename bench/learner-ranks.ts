// `rollstream bench learner`, ranks part: one learner step on this machine as 1 rank with 1 thread (the baseline),
// 1 rank with 2 threads, and 2 MPI ranks with 1 thread each (mpirun -np 2, ZeRO-1: reduce-scatter of the gradient,
// AdamW on each rank's half, all-gather of the parameters), the same samples and micro-batches, measured in this run.
// 2 threads in one rank against 2 ranks of 1 thread is the communication's cost, honestly: the same cores, the
// ranks paying for the collectives (and for waiting on each other) where the threads share memory.
// Then a model of N ranks on a bigger machine: T(N) = T1 / N + 2 (N - 1) / N * 4P / B, the compute split N ways
// (micro-batches and AdamW slices) plus a ring reduce-scatter and all-gather of P f32 values at bandwidth B per rank
// (B measured here on shared memory, and a stated 10 GB/s network), latency ignored; it assumes N cores or devices
// each as fast as this one and enough micro-batches per step to split evenly.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { mpirunArgs } from "../actors/runtime/learner-ranks.js";
import { PolicyModel } from "../kernels/index.js";
import { parseLossSpec } from "../kernels/loss-spec.js";
import { nativeComm } from "../kernels/native.js";
import { packSamples } from "../kernels/packing.js";
import { trainOnSamples } from "../kernels/train-step.js";
import { benchModel, groupSamples } from "./learner.js";

const OPT = { lr: 1e-4, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, schedule: "constant", warmupSteps: 0, minLr: 0 } as const;

interface RankFigures {
  stepMs: number;
  inCollectivesMs: number;
  commOnlyMs: number;
  loss: number;
  /** Resident memory before the model (after MPI's init for a rank). */
  rssBeforeKb: number;
  mpiInitKb?: number;
  peakRssKb: number;
  microBatches: number;
  numParams: number;
  momentFloats: number;
}

/** Mean step time (ms) of one process with `threads` threads, and its last loss. */
async function oneRank(cfg: ReturnType<typeof benchModel>, samples: ReturnType<typeof groupSamples>, mbt: number, threads: number, steps: number) {
  const model = PolicyModel.create(cfg, { seed: 7, threads });
  const spec = parseLossSpec({ name: "rl" });
  const packed = packSamples(samples, mbt, cfg.maxPositionEmbeddings, { sharePrefix: false });
  try {
    await trainOnSamples(model, packed, spec, OPT as never);
    const t0 = performance.now();
    let loss = 0;
    for (let s = 0; s < steps; s++) loss = (await trainOnSamples(model, packed, spec, OPT as never)).loss;
    return { stepMs: (performance.now() - t0) / steps, loss, microBatches: packed.microBatches.length };
  } finally {
    model.dispose();
  }
}

/** Runs the worker: under `mpirun -np 2` (ZeRO-1), or alone without MPI (plain: the model's own step). */
function runWorker(cfg: ReturnType<typeof benchModel>, samples: ReturnType<typeof groupSamples>, mbt: number, steps: number, plain = false): RankFigures {
  const dir = mkdtempSync(join(tmpdir(), "rs-bench-ranks-"));
  try {
    const samplesFile = join(dir, "samples.json");
    writeFileSync(
      samplesFile,
      JSON.stringify(
        samples.map((s) => ({
          ...s,
          promptIds: Array.from(s.promptIds),
          completionIds: Array.from(s.completionIds),
          completionMask: Array.from(s.completionMask),
          samplerLogprobs: Array.from(s.samplerLogprobs),
        })),
      ),
    );
    const out = join(dir, "rank0.json");
    const worker = fileURLToPath(new URL("./learner-ranks-worker.js", import.meta.url));
    const job = JSON.stringify({ cfg, samplesFile, microBatchTokens: mbt, steps, out, plain });
    const [cmd, args] = plain ? [process.execPath, [worker, job]] : ["mpirun", mpirunArgs(2, [process.execPath, worker, job])];
    const r = spawnSync(cmd, args, { encoding: "utf8", timeout: 600_000, env: { ...process.env, OMPI_MCA_plm_rsh_agent: "" } });
    if (r.status !== 0) throw new Error(`${plain ? "the plain worker" : "mpirun -np 2"} failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
    return JSON.parse(readFileSync(out, "utf8")) as RankFigures;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A model big enough that its buffers, not Node, dominate a process's memory (about 26M parameters; quick: 7M). */
function memoryModel(quick: boolean): ReturnType<typeof benchModel> {
  const base = benchModel(quick);
  return { ...base, hiddenSize: quick ? 256 : 512, intermediateSize: quick ? 768 : 1536, numLayers: quick ? 4 : 8, maxPositionEmbeddings: 256 };
}

/** Peak resident memory of one process with the whole optimizer state against each of 2 ZeRO-1 ranks, same model. */
export function memoryLines(quick: boolean, result: Record<string, number>): string[] {
  const cfg = memoryModel(quick);
  const samples = groupSamples(2, 32, 32, cfg.vocabSize, 5);
  const one = runWorker(cfg, samples, 256, 1, true);
  const two = runWorker(cfg, samples, 256, 1);
  const mb = (kb: number) => kb / 1024;
  const modelMb = (f: RankFigures) => mb(f.peakRssKb - f.rssBeforeKb);
  const P = one.numParams;
  Object.assign(result, {
    ranks_mem_params: P,
    ranks_mem_peak_mb_1process: mb(one.peakRssKb),
    ranks_mem_peak_mb_per_rank_2ranks: mb(two.peakRssKb),
    ranks_mem_model_mb_1process: modelMb(one),
    ranks_mem_model_mb_per_rank_2ranks: modelMb(two),
    ranks_mem_model_ratio_2ranks: modelMb(two) / modelMb(one),
    ranks_mem_mpi_init_mb: mb(two.mpiInitKb ?? 0),
  });
  return [
    `memory: ${P} params (${((16 * P) / 2 ** 20).toFixed(0)} MiB of params + grads + AdamW m, v in one process), 1 step`,
    `${"setup".padEnd(30)}${"peak RSS MiB".padStart(14)}${"above start".padStart(13)}${"ratio".padStart(8)}`,
    `${"1 process, whole optimizer".padEnd(30)}${mb(one.peakRssKb).toFixed(0).padStart(14)}${modelMb(one).toFixed(0).padStart(13)}${"1.00x".padStart(8)}`,
    `${"each of 2 ZeRO-1 ranks".padEnd(30)}${mb(two.peakRssKb).toFixed(0).padStart(14)}${modelMb(two).toFixed(0).padStart(13)}${`${(modelMb(two) / modelMb(one)).toFixed(2)}x`.padStart(8)}`,
    `above start: from just before the model is created (a rank's MPI init, ${mb(two.mpiInitKb ?? 0).toFixed(0)} MiB, not counted); params + grads whole on every rank and moments 1/N: (2 + 2/N) / 4 of the buffers, 0.75x at N = 2, toward 0.5x as N grows`,
  ];
}

/** Adds the ranks' figures to `result` and prints their table; nothing (saying why) without MPI. */
export async function runRanksBench(opts: { quick: boolean; seconds: number }, result: Record<string, number>): Promise<string[]> {
  if (!nativeComm().available || spawnSync("mpirun", ["--version"]).status !== 0)
    return ["ranks: skipped (the kernels addon was built without MPI, or mpirun is missing: install openmpi-bin and libopenmpi-dev, rebuild)"];
  const cfg = benchModel(opts.quick);
  const unit = opts.quick ? 16 : 64;
  const samples = groupSamples(4, 5 * unit, 5 * unit, cfg.vocabSize, 11); // 32 samples of 10 units
  const mbt = 40 * unit; // 4 samples per micro-batch: 8 micro-batches, 4 per rank
  const probe = await oneRank(cfg, samples, mbt, 1, 1);
  const steps = Math.max(2, Math.round((opts.seconds * 1000) / probe.stepMs));
  // Baseline before and after the others, so a drift in this shared machine's speed lands on both sides.
  const a = await oneRank(cfg, samples, mbt, 1, steps);
  const two = runWorker(cfg, samples, mbt, steps);
  const threads2 = await oneRank(cfg, samples, mbt, 2, steps);
  const b = await oneRank(cfg, samples, mbt, 1, steps);
  const base = (a.stepMs + b.stepMs) / 2;
  const P = two.numParams;
  const bytesPerRank = ((2 * (2 - 1)) / 2) * 4 * P; // ring reduce-scatter + all-gather, N = 2
  const bandwidth = bytesPerRank / (two.commOnlyMs / 1000); // bytes/s each rank moves
  const model = (n: number, bw: number) => base / n + ((((2 * (n - 1)) / n) * 4 * P) / bw) * 1000;
  Object.assign(result, {
    ranks_params: P,
    ranks_micro_batches: two.microBatches,
    ranks_step_ms_1rank_1thread: base,
    ranks_step_ms_1rank_2threads: threads2.stepMs,
    ranks_step_ms_2ranks_1thread: two.stepMs,
    ranks_speedup_1rank_2threads: base / threads2.stepMs,
    ranks_speedup_2ranks: base / two.stepMs,
    ranks_2ranks_vs_2threads: threads2.stepMs / two.stepMs,
    ranks_in_collectives_ms: two.inCollectivesMs,
    ranks_collectives_only_ms: two.commOnlyMs,
    ranks_bandwidth_gb_s: bandwidth / 1e9,
    ranks_loss_rel_diff: Math.abs(two.loss - a.loss) / Math.max(1e-12, Math.abs(a.loss)),
    ranks_moment_fraction_per_rank: two.momentFloats / (2 * P),
  });
  const lines = [
    `ranks: ${P} params, ${two.microBatches} micro-batches per step of ${samples.length} samples, ${steps} steps each, same samples`,
    `${"setup".padEnd(26)}${"step ms".padStart(9)}${"speedup".padStart(9)}`,
    `${"1 rank x 1 thread".padEnd(26)}${base.toFixed(1).padStart(9)}${"1.00x".padStart(9)}`,
    `${"1 rank x 2 threads".padEnd(26)}${threads2.stepMs.toFixed(1).padStart(9)}${`${(base / threads2.stepMs).toFixed(2)}x`.padStart(9)}`,
    `${"2 ranks x 1 thread (MPI)".padEnd(26)}${two.stepMs.toFixed(1).padStart(9)}${`${(base / two.stepMs).toFixed(2)}x`.padStart(9)}`,
    `2 ranks: ${two.inCollectivesMs.toFixed(1)} ms of each step in collectives (waiting for the other rank included); the reduce-scatter + all-gather alone ${two.commOnlyMs.toFixed(2)} ms = ${(bandwidth / 1e9).toFixed(2)} GB/s per rank; each rank keeps ${((100 * two.momentFloats) / (2 * P)).toFixed(0)}% of the moments`,
    `model of N ranks (T1/N + ring reduce-scatter + all-gather of ${((4 * P) / 1e6).toFixed(1)} MB): ` +
      [2, 4, 8, 16]
        .map(
          (n) =>
            `N=${n} ${(base / model(n, bandwidth)).toFixed(2)}x (at ${(bandwidth / 1e9).toFixed(1)} GB/s), ${(base / model(n, 10e9)).toFixed(2)}x (10 GB/s)`,
        )
        .join("; "),
  ];
  for (const n of [2, 4, 8, 16]) {
    result[`ranks_model_speedup_${n}_measured_bw`] = base / model(n, bandwidth);
    result[`ranks_model_speedup_${n}_10gbs`] = base / model(n, 10e9);
  }
  return [...lines, "", ...memoryLines(opts.quick, result)];
}
