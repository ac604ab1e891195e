// Learner ranks with rl.loss gspo and with model.lora (kernels/train-step.ts trainOnRanks, kernels/zero1-lora.ts):
// 2 ranks over MPI (the real RankGroup: rank 0 plans, rank 1 follows) train the same 3 steps as 1 rank
// (trainOnSamples) on the same global batch. GSPO: the same loss, clipped fraction, mismatch, entropy and grad norm,
// and the same weights. LoRA (dropout 0 and 0.1, the latter also under gspo): the same adapters, the base weights
// bit for bit the initial ones and every rank's model the merge of the same adapters, each rank holding half of the
// adapters' moments; a 2-rank LoRA checkpoint restores onto 1 rank and onto 2.
//
// Tolerance, as test/ranks/zero1-mpi.test.ts: relative 1e-5 on the reported figures and on weights and adapters
// (assertClose rtol 1e-5, atol 1e-8), 1e-4 on the gathered moments, because the ranks sum the gradient (and the norm's
// squares, and the loss) in another order than one rank; each per-element update is the same kernel. Each comparison
// has a positive control: a batch with one advantage changed by 0.5 trains weights the comparison tells apart.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { LoraAdapters } from "../../kernels/lora.js";
import { decodeTrainStateWithLora } from "../../kernels/train-state.js";
import { trainOnSamples, type StepReport } from "../../kernels/train-step.js";
import { assertClose } from "../kernels/helpers.js";
import { type LossCase, setupCase } from "./loss-fixture.js";
import { mpirun, mpiSkip as skip, readF32 } from "./mpi.js";

const script = fileURLToPath(new URL("./loss-rank.js", import.meta.url));
const RTOL = 1e-5;
const ATOL = 1e-8;
const FIGURES = ["loss", "entropy", "mismatchKl", "maskedFraction", "gradNorm"] as const;

/** One process: the case's whole global batch each step (what replay and a 1-rank learner train). */
async function oneRank(c: LossCase, steps: number) {
  const s = setupCase(c);
  assert.ok(s.packed.microBatches.length >= 2, "both ranks get micro-batches");
  const reports: StepReport[] = [];
  const params: Float32Array[] = [];
  const adapters: Float32Array[] = [];
  for (let k = 0; k < steps; k++) {
    reports.push(await trainOnSamples(s.model, s.packed, s.loss, s.opt, s.lora, k));
    params.push(s.model.getParams());
    if (s.lora) adapters.push(s.lora.params.slice());
  }
  s.model.dispose();
  return { reports, params, adapters, lora: s.lora, initial: s.initial };
}

interface RankOut {
  reports?: StepReport[];
  losses?: number[];
  adapterMomentFloats: number | null;
}

/** 2 ranks of the case (from the checkpoint folder `resumeFrom`, when given): what they wrote. */
function twoRanks(c: LossCase, steps: number, resumeFrom?: string) {
  const dir = mkdtempSync(join(tmpdir(), "rs-ranks-loss-"));
  mpirun(script, 2, [dir, JSON.stringify(c), String(steps), ...(resumeFrom ? [resumeFrom] : [])]);
  const json = (r: number) => JSON.parse(readFileSync(join(dir, `rank${r}.json`), "utf8")) as RankOut;
  const lora = c.lora !== undefined;
  return {
    dir,
    r0: json(0),
    r1: json(1),
    params: [readF32(dir, "params0.bin"), readF32(dir, "params1.bin")] as const,
    adapters: lora ? ([readF32(dir, "adapters0.bin"), readF32(dir, "adapters1.bin")] as const) : null,
    state: new Uint8Array(readFileSync(join(dir, "state.bin"))),
  };
}

/** Rank 0's reports equal one process's; every rank reports the all-reduced loss. */
function assertSameReports(two: ReturnType<typeof twoRanks>, base: StepReport[]): void {
  const got = two.r0.reports!;
  assert.equal(got.length, base.length);
  got.forEach((r, i) => {
    for (const k of FIGURES) {
      const want = base[i]![k];
      assert.ok(Math.abs(r[k] - want) <= RTOL * Math.abs(want) + ATOL, `step ${i + 1} ${k}: 2 ranks ${r[k]}, 1 rank ${want}`);
    }
    assert.equal(r.optimizerStep, base[i]!.optimizerStep);
  });
  assert.deepEqual(
    two.r1.losses,
    got.map((r) => r.loss),
    "rank 1 reports the same all-reduced loss",
  );
}

/** ||a - b|| / ||b||: what the tests print of each 2-rank vs 1-rank comparison. */
function relDiff(a: Float32Array, b: Float32Array): string {
  let num = 0,
    den = 0;
  for (let i = 0; i < b.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num / den).toExponential(1);
}

const bitsEqual = (a: Float32Array, b: Float32Array) =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

test("learner ranks, rl.loss gspo: 2 ranks report and train the same 3 steps as 1 rank (sequence count all-reduced)", { skip }, async () => {
  const c: LossCase = { loss: "gspo" };
  const base = await oneRank(c, 3);
  assert.ok(
    base.reports.every((r) => r.maskedFraction > 0 && r.maskedFraction < 1),
    `every step, some sequences clip and some train: ${base.reports.map((r) => r.maskedFraction)}`,
  );
  const two = twoRanks(c, 3);
  assertSameReports(two, base.reports);
  assertClose(two.params[0], base.params[2]!, "gspo params after 3 steps, 2 ranks vs 1", RTOL, ATOL);
  process.stdout.write(`# gspo, 2 ranks vs 1: params ${relDiff(two.params[0], base.params[2]!)} relative\n`);
  assert.ok(bitsEqual(two.params[1], two.params[0]), "both ranks hold the same weights");
  // Positive control: one changed advantage trains weights this comparison tells apart.
  const other = await oneRank({ ...c, perturb: 0.5 }, 3);
  assert.throws(() => assertClose(two.params[0], other.params[2]!, "control", RTOL, ATOL));
});

/** The checks of a LoRA case on 2 ranks against 1: adapters, frozen base, merged weights, moments. */
async function checkLora(c: LossCase): Promise<void> {
  const base = await oneRank(c, 3);
  if (c.loss === "gspo")
    assert.ok(
      base.reports.every((r) => r.maskedFraction > 0 && r.maskedFraction < 1),
      `every step, some sequences clip and some train: ${base.reports.map((r) => r.maskedFraction)}`,
    );
  const two = twoRanks(c, 3);
  const [a0, a1] = two.adapters!;
  assertSameReports(two, base.reports);
  assertClose(a0, base.adapters[2]!, "adapters after 3 steps, 2 ranks vs 1", RTOL, ATOL);
  process.stdout.write(`# lora ${JSON.stringify(c)}, 2 ranks vs 1: adapters ${relDiff(a0, base.adapters[2]!)} relative\n`);
  assertClose(two.params[0], base.params[2]!, "merged weights after 3 steps, 2 ranks vs 1", RTOL, ATOL);
  assert.ok(bitsEqual(a1, a0) && bitsEqual(two.params[1], two.params[0]), "both ranks hold the same adapters and merge them alike");
  // The base never moves: each rank's model is exactly the initial weights with the adapted tensors merged from its adapters.
  const lora = base.lora!;
  const expected = new LoraAdapters(lora.settings, lora.targets, base.initial, a0).merged(base.initial);
  assert.ok(bitsEqual(two.params[0], expected), "every weight outside the adapted tensors keeps its bits; those are base + scale * B A");
  const decoded = setupCase(c);
  const restored = decodeTrainStateWithLora(decoded.model, two.state).lora!;
  assert.ok(bitsEqual(restored.targetBase, lora.targetBase), "the checkpoint's base is the initial one, bit for bit");
  // ZeRO-1 over the adapters: each rank holds half of their moments; gathered, they are one rank's.
  const n = 2 * lora.params.length;
  assert.equal(two.r0.adapterMomentFloats! + two.r1.adapterMomentFloats!, n);
  assert.ok(Math.abs(two.r0.adapterMomentFloats! - two.r1.adapterMomentFloats!) <= 2, `${two.r0.adapterMomentFloats} vs ${two.r1.adapterMomentFloats}`);
  assertClose(restored.m, lora.m, "adapters' adam m", 1e-4, 1e-10);
  assertClose(restored.v, lora.v, "adapters' adam v", 1e-4, 1e-12);
  decoded.model.dispose();
  // Positive controls: a changed advantage trains other adapters; dropout > 0 trains others than dropout 0.
  const other = await oneRank({ ...c, perturb: 0.5 }, 3);
  assert.throws(() => assertClose(a0, other.adapters[2]!, "control", RTOL, ATOL));
  if (c.lora!.dropout > 0) {
    const noDropout = await oneRank({ ...c, lora: { dropout: 0 } }, 3);
    assert.throws(() => assertClose(a0, noDropout.adapters[2]!, "dropout control", RTOL, ATOL));
  }
}

for (const c of [
  { loss: "rl", lora: { dropout: 0 } },
  { loss: "rl", lora: { dropout: 0.1 } },
  { loss: "gspo", lora: { dropout: 0.1 } },
] satisfies LossCase[])
  test(
    `learner ranks, model.lora (dropout ${c.lora.dropout}, ${c.loss}): 2 ranks train the same adapters as 1 rank; base bit-identical; half the adapters' moments each`,
    { skip },
    () => checkLora(c),
  );

test("learner ranks, model.lora (dropout 0.1): a 2-rank checkpoint restores onto 1 rank and onto 2", { skip }, async () => {
  const c: LossCase = { loss: "rl", lora: { dropout: 0.1 } };
  const base = await oneRank(c, 3);
  const ckpt = twoRanks(c, 2);
  // Onto 1 rank: the training state's adapters and full moments, step 3 as one process trains it.
  const one = setupCase(c);
  const lora = decodeTrainStateWithLora(one.model, ckpt.state).lora!;
  assert.equal(lora.step, 2);
  await trainOnSamples(one.model, one.packed, one.loss, one.opt, lora, 2);
  assertClose(lora.params, base.adapters[2]!, "2-rank checkpoint -> 1 rank, step 3", RTOL, ATOL);
  one.model.dispose();
  // Positive control: the same restore without the checkpoint's moments trains other adapters.
  const fresh = setupCase(c);
  const noMoments = decodeTrainStateWithLora(fresh.model, ckpt.state).lora!;
  noMoments.resetOptimizer();
  await trainOnSamples(fresh.model, fresh.packed, fresh.loss, fresh.opt, noMoments, 2);
  assert.throws(() => assertClose(noMoments.params, base.adapters[2]!, "control", RTOL, ATOL));
  fresh.model.dispose();
  // Onto 2 ranks: each takes its slice of the full adapter moments.
  const two = twoRanks(c, 1, ckpt.dir);
  assert.equal(two.r0.reports![0]!.optimizerStep, 3);
  assertClose(two.adapters![0], base.adapters[2]!, "2-rank checkpoint -> 2 ranks, step 3", RTOL, ATOL);
  assertClose(two.params[0], base.params[2]!, "2-rank checkpoint -> 2 ranks, merged weights", RTOL, ATOL);
});
