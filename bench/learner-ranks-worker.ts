// One rank of `rollstream bench learner`'s ranks part (started by mpirun from bench/learner-ranks.ts): trains `steps`
// ZeRO-1 steps of the bench's samples, its micro-batches m % size == rank, and times the step, the time inside the
// collectives (waiting for the slower rank included), and the collectives alone on the model's gradient after a
// barrier, and each rank's peak resident memory. Rank 0 writes the figures as JSON to the file named in the arguments.
// With job.plain it runs alone without MPI and steps with the model's own whole optimizer state (the memory baseline).
// Args: <json {cfg, samples, microBatchTokens, steps, out}>.
import { readFileSync, writeFileSync } from "node:fs";
import { PolicyModel } from "../kernels/index.js";
import type { ModelConfig } from "../kernels/model-config.js";
import { parseLossSpec } from "../kernels/loss-spec.js";
import { nativeComm, type NativeComm } from "../kernels/native.js";
import { packSamples, type TrainSample } from "../kernels/packing.js";
import { trainOnRanks, trainOnSamples } from "../kernels/train-step.js";
import { Zero1Optimizer } from "../kernels/zero1.js";

interface Job {
  cfg: ModelConfig;
  samplesFile: string;
  microBatchTokens: number;
  steps: number;
  out: string;
  /** No MPI: one process stepping with the model's own optimizer (the memory baseline). */
  plain?: boolean;
}

const OPT = { lr: 1e-4, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, schedule: "constant", warmupSteps: 0, minLr: 0 } as const;

/** Adds the wall time of the collectives (the model's in-place ones and the comm's all-reduce) up. */
function timeCollectives(model: PolicyModel, comm: NativeComm): () => number {
  let ms = 0;
  const wrap =
    <A extends unknown[], R>(f: (...a: A) => R) =>
    (...a: A): R => {
      const t = performance.now();
      try {
        return f(...a);
      } finally {
        ms += performance.now() - t;
      }
    };
  model.reduceScatterGrads = wrap(model.reduceScatterGrads.bind(model));
  model.allGatherParams = wrap(model.allGatherParams.bind(model));
  comm.allReduceSum = wrap(comm.allReduceSum.bind(comm));
  return () => ms;
}

/** Resident set size now and at its peak (kB), from /proc/self/status. */
function rssKb(): { now: number; peak: number } {
  const status = readFileSync("/proc/self/status", "utf8");
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? Number.NaN);
  return { now: kb("VmRSS"), peak: kb("VmHWM") };
}

const job = JSON.parse(process.argv[2]!) as Job;
const samples = (JSON.parse(readFileSync(job.samplesFile, "utf8")) as Array<Record<string, number[] | number>>).map(
  (s): TrainSample => ({
    promptIds: Int32Array.from(s.promptIds as number[]),
    completionIds: Int32Array.from(s.completionIds as number[]),
    completionMask: Uint8Array.from(s.completionMask as number[]),
    samplerLogprobs: Float32Array.from(s.samplerLogprobs as number[]),
    advantage: s.advantage as number,
  }),
);
const rssBefore = rssKb().now;
const spec = parseLossSpec({ name: "rl" });
const packed = packSamples(samples, job.microBatchTokens, job.cfg.maxPositionEmbeddings, { sharePrefix: false });
if (job.plain) {
  // One process without MPI: the model's own step with the whole optimizer state (the memory baseline).
  const model = PolicyModel.create(job.cfg, { seed: 7, threads: 1 });
  for (let s = 0; s < job.steps; s++) await trainOnSamples(model, packed, spec, OPT as never);
  writeFileSync(job.out, JSON.stringify({ size: 1, rssBeforeKb: rssBefore, peakRssKb: rssKb().peak, numParams: model.numParams }));
  model.dispose();
  process.exit(0);
}
const comm = nativeComm();
const { rank, size } = comm.init();
const rssAfterInit = rssKb().now; // Open MPI's libraries and shared-memory segments: not the model's
const model = PolicyModel.create(job.cfg, { seed: 7, threads: 1 });
const zero = new Zero1Optimizer(model, comm, rank, size);
const inCollectives = timeCollectives(model, comm);
await trainOnRanks(model, packed, spec, OPT as never, zero); // warm-up
comm.barrier();
const commBefore = inCollectives();
const t0 = performance.now();
let loss = 0;
for (let s = 0; s < job.steps; s++) loss = (await trainOnRanks(model, packed, spec, OPT as never, zero)).loss;
const stepMs = (performance.now() - t0) / job.steps;
const inCollectivesMs = (inCollectives() - commBefore) / job.steps;
// The collectives alone, both ranks ready: reduce-scatter of the gradient + all-gather of the parameters.
comm.barrier();
const c0 = performance.now();
const reps = 10;
for (let i = 0; i < reps; i++) {
  model.reduceScatterGrads(zero.counts);
  model.allGatherParams(zero.counts);
}
const commOnlyMs = (performance.now() - c0) / reps;
const peaks = new Float64Array(size);
peaks[rank] = rssKb().peak;
comm.allReduceSum(peaks);
if (rank === 0)
  writeFileSync(
    job.out,
    JSON.stringify({
      size,
      stepMs,
      inCollectivesMs,
      commOnlyMs,
      loss,
      microBatches: packed.microBatches.length,
      numParams: model.numParams,
      momentFloats: 2 * model.optimizerShard.count,
      rssBeforeKb: rssAfterInit,
      mpiInitKb: rssAfterInit - rssBefore,
      peakRssKb: Math.max(...peaks),
    }),
  );
model.dispose();
comm.finalize();
