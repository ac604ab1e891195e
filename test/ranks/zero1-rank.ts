// One learner rank of the ZeRO-1 tests (started by mpirun from zero1-mpi.test.ts): trains `steps` steps of the
// shared fixture's global batch, each rank on its micro-batches (i % size == rank), and writes what the test
// compares. Args: outDir steps [resumeFrom]. With resumeFrom, it first loads that checkpoint (full params and
// optimizer state, from any number of ranks) and takes its slice.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PolicyModel } from "../../kernels/index.js";
import { nativeComm } from "../../kernels/native.js";
import { Zero1Optimizer } from "../../kernels/zero1.js";
import { fixture } from "./zero1-fixture.js";

const [outDir, stepsArg, resumeFrom] = process.argv.slice(2);
const comm = nativeComm();
const { rank, size } = comm.init();
const f = fixture();
const model = PolicyModel.create(f.cfg, { seed: f.seed, threads: 1 });
const zero = new Zero1Optimizer(model, comm, rank, size);
if (resumeFrom) {
  const read = (name: string) => new Float32Array(new Uint8Array(readFileSync(join(resumeFrom, name))).buffer);
  model.setParams(read("params.bin"));
  zero.restore({ m: read("m.bin"), v: read("v.bin"), step: JSON.parse(readFileSync(join(resumeFrom, "step.json"), "utf8")).step });
}
const losses: number[] = [];
for (let s = 0; s < Number(stepsArg); s++) {
  const loss = new Float64Array(1);
  for (const [i, mb] of f.packed.microBatches.entries()) {
    if (i % size !== rank) continue;
    loss[0]! += (await model.accumulate(mb, f.spec, f.packed.lossTokens)).loss;
  }
  comm.allReduceSum(loss);
  await zero.step(f.opt);
  losses.push(loss[0]!);
}
// The checkpoint: full state gathered on every rank, written by rank 0 (as the learner's rank 0 publishes it).
const state = zero.fullState();
if (rank === 0) {
  writeFileSync(join(outDir, "params.bin"), model.getParams());
  writeFileSync(join(outDir, "m.bin"), state.m);
  writeFileSync(join(outDir, "v.bin"), state.v);
  writeFileSync(join(outDir, "step.json"), JSON.stringify({ step: state.step }));
}
writeFileSync(
  join(outDir, `rank${rank}.json`),
  JSON.stringify({
    rank,
    size,
    losses,
    momentFloats: 2 * model.optimizerShard.count,
    collectives: zero.collectives.kind,
    sliceFloats: 2 * zero.count,
    numParams: model.numParams,
  }),
);
model.dispose();
comm.finalize();
