// One rank of `rollstream bench learner`'s ranks part (started by mpirun from bench/learner-ranks.ts): trains `steps`
// ZeRO-1 steps of the bench's samples, its micro-batches m % size == rank, and times the step, the time inside the
// collectives (waiting for the slower rank included), and the collectives alone on the model's gradient after a
// barrier. Rank 0 writes the figures as JSON to the file named in the arguments.
// Args: <json {cfg, samples, microBatchTokens, steps, out}>.
import { readFileSync, writeFileSync } from "node:fs";
import { PolicyModel } from "../kernels/index.js";
import type { ModelConfig } from "../kernels/model-config.js";
import { parseLossSpec } from "../kernels/loss-spec.js";
import { nativeComm, type NativeComm } from "../kernels/native.js";
import { packSamples, type TrainSample } from "../kernels/packing.js";
import { trainOnRanks } from "../kernels/train-step.js";
import { Zero1Optimizer } from "../kernels/zero1.js";

interface Job {
  cfg: ModelConfig;
  samplesFile: string;
  microBatchTokens: number;
  steps: number;
  out: string;
}

const OPT = { lr: 1e-4, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, schedule: "constant", warmupSteps: 0, minLr: 0 } as const;

/** The communicator with the wall time spent in its collectives added up. */
function timed(comm: NativeComm): { comm: NativeComm; ms: () => number } {
  let ms = 0;
  const wrap =
    <A extends unknown[]>(f: (...a: A) => void) =>
    (...a: A) => {
      const t = performance.now();
      f(...a);
      ms += performance.now() - t;
    };
  const c: NativeComm = {
    ...comm,
    reduceScatter: wrap(comm.reduceScatter.bind(comm)),
    allGather: wrap(comm.allGather.bind(comm)),
    allReduceSum: wrap(comm.allReduceSum.bind(comm)),
  };
  return { comm: c, ms: () => ms };
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
const raw = nativeComm();
const { rank, size } = raw.init();
const t = timed(raw);
const model = PolicyModel.create(job.cfg, { seed: 7, threads: 1 });
const zero = new Zero1Optimizer(model, t.comm, rank, size);
const spec = parseLossSpec({ name: "rl" });
const packed = packSamples(samples, job.microBatchTokens, job.cfg.maxPositionEmbeddings, { sharePrefix: false });
await trainOnRanks(model, packed, spec, OPT as never, zero); // warm-up
raw.barrier();
const commBefore = t.ms();
const t0 = performance.now();
let loss = 0;
for (let s = 0; s < job.steps; s++) loss = (await trainOnRanks(model, packed, spec, OPT as never, zero)).loss;
const stepMs = (performance.now() - t0) / job.steps;
const inCollectivesMs = (t.ms() - commBefore) / job.steps;
// The collectives alone, both ranks ready: reduce-scatter of the gradient + all-gather of the parameters.
const grads = model.getGrads();
const slice = new Float32Array(zero.count);
const params = new Float32Array(model.numParams);
raw.barrier();
const c0 = performance.now();
const reps = 10;
for (let i = 0; i < reps; i++) {
  raw.reduceScatter(grads, slice, zero.counts);
  raw.allGather(slice, params, zero.counts);
}
const commOnlyMs = (performance.now() - c0) / reps;
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
      momentFloats: 2 * zero.count,
    }),
  );
model.dispose();
raw.finalize();
