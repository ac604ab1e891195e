// One learner rank of the loss tests (started by mpirun from loss-mpi.test.ts): the real RankGroup, rank 0 planning
// and the others following, trains `steps` steps of a case (test/ranks/loss-fixture.ts) and writes what the test
// compares. Args: outDir caseJson steps [resumeFrom]. Rank 0 hands the others its starting state as the learner does
// (a fresh one with the case's adapters, or the training state resumeFrom/state.bin written by any number of ranks),
// gathers the moments at the end and writes the training state (state.bin) a checkpoint would hold.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { nativeComm } from "../../kernels/native.js";
import { RankGroup } from "../../kernels/rank-group.js";
import type { StepReport } from "../../kernels/train-step.js";
import { decodeTrainStateWithLora, encodeTrainState } from "../../kernels/train-state.js";
import { type LossCase, setupCase } from "./loss-fixture.js";

const [outDir, caseArg, stepsArg, resumeFrom] = process.argv.slice(2) as [string, string, string, string | undefined];
const comm = nativeComm();
const { rank, size } = comm.init();
const c = setupCase(JSON.parse(caseArg) as LossCase);
const { model } = c;
const group = new RankGroup(model, comm, rank, size);
const counters = (step: number) => ({ step, sftDone: true, readerSeq: 1, droppedStale: 0, samplesSeen: 0, optimizerStep: step });
const out = (name: string, data: Uint8Array | Float32Array | string) => writeFileSync(join(outDir, name), data);

if (rank === 0) {
  let lora = c.lora;
  let first = 0;
  // The group already sharded the model's moments (fresh: zeros), so the state takes them whole from here.
  const fresh = { m: new Float32Array(model.numParams), v: new Float32Array(model.numParams), step: 0 };
  let bytes = encodeTrainState(model, counters(0), lora, "", fresh);
  if (resumeFrom) {
    bytes = new Uint8Array(readFileSync(join(resumeFrom, "state.bin")));
    const r = decodeTrainStateWithLora(model, bytes);
    lora = r.lora;
    first = r.counters.step;
  }
  await group.loadState(bytes, lora);
  const reports: StepReport[] = [];
  for (let s = 0; s < Number(stepsArg); s++) reports.push(await group.train(c.samples, c.loss, c.opt, c.f.pack, first + s));
  const moments = await group.gather();
  out("state.bin", encodeTrainState(model, counters(first + reports.length), lora, "", moments));
  out("params0.bin", model.getParams());
  if (lora) out("adapters0.bin", lora.params);
  out("rank0.json", JSON.stringify({ reports, adapterMomentFloats: group.adapters ? group.adapters.m.length + group.adapters.v.length : null }));
  await group.stop();
} else {
  const losses: number[] = [];
  await group.follow((msg, fields) => {
    if (msg === "step") losses.push((fields as { loss: number }).loss);
  });
  out("params1.bin", model.getParams());
  if (group.adapters) out("adapters1.bin", group.adapters.lora.params);
  out("rank1.json", JSON.stringify({ losses, adapterMomentFloats: group.adapters ? group.adapters.m.length + group.adapters.v.length : null }));
}
model.dispose();
