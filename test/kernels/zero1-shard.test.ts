// The native half of ZeRO-1 (rs_model_shard_optimizer / rs_model_shard_step, ABI 6) in one process: two models
// stand for two ranks that already hold the summed gradient, each steps its slice with the global norm, and their
// slices together are the one-process step bit for bit (the collectives themselves are test/ranks/zero1-mpi).
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel } from "../../kernels/index.js";
import { sliceCounts } from "../../kernels/zero1.js";
import { decodeTrainStateWithLora, encodeTrainState, splitMoments } from "../../kernels/train-state.js";
import { fixture } from "../ranks/zero1-fixture.js";

async function withGrads(f: ReturnType<typeof fixture>, steps: number): Promise<PolicyModel> {
  const model = PolicyModel.create(f.cfg, { seed: f.seed, threads: 1 });
  for (let s = 0; s < steps; s++) {
    for (const mb of f.packed.microBatches) await model.accumulate(mb, f.spec, f.packed.lossTokens);
    if (s < steps - 1) await model.step(f.opt);
  }
  return model; // after steps - 1 optimizer steps, holding the next step's gradient
}

test("ZeRO-1 slices: each slice's shard step equals that slice of the whole step, bit for bit (3 steps, clipped)", async () => {
  const f = fixture();
  const whole = await withGrads(f, 3);
  const before = { params: whole.getParams(), grads: whole.getGrads(), opt: whole.exportOptimizerState() };
  const r = await whole.step(f.opt);
  assert.ok(r.clipped, "the fixture's clip is active (the global norm matters)");
  const after = { params: whole.getParams(), opt: whole.exportOptimizerState() };
  const counts = sliceCounts(whole.numParams, 2);
  const joined = new Float32Array(whole.numParams);
  for (const [rank, count] of counts.entries()) {
    const offset = rank === 0 ? 0 : counts[0]!;
    const m = PolicyModel.create(f.cfg, { seed: f.seed, threads: 1 });
    m.setParams(before.params);
    m.importOptimizerState(before.opt);
    m.shardOptimizer(offset, count);
    assert.deepEqual(m.optimizerShard, { offset, count });
    assert.deepEqual(m.readMoments(offset, count).m, before.opt.m.subarray(offset, offset + count), "the slice's moments are kept");
    // The grads as a reduce-scatter leaves them: this slice summed (here: the one process's), the rest anything.
    const g = new Float32Array(whole.numParams).fill(7);
    g.set(before.grads.subarray(offset, offset + count), offset);
    m.setGrads(g);
    const s = await m.shardStep(f.opt, r.gradNorm);
    assert.deepEqual([s.clipped, s.skipped, s.step], [true, false, r.step]);
    const p = m.getParams();
    joined.set(p.subarray(offset, offset + count), offset);
    assert.deepEqual(m.readMoments(offset, count).v, after.opt.v.subarray(offset, offset + count), `rank ${rank}'s v`);
    assert.ok(
      m.getGrads().every((x) => x === 0),
      "the step zeroes the grads",
    );
    m.dispose();
  }
  assert.deepEqual(joined, after.params, "the slices joined are the whole step's params");
  whole.dispose();
});

test("ZeRO-1 slices: a sharded model refuses what needs the whole state, and a wrong norm changes the step (control)", async () => {
  const f = fixture();
  const m = await withGrads(f, 1);
  const n = m.numParams;
  const g = m.getGrads();
  const p0 = m.getParams();
  m.shardOptimizer(10, n - 20);
  assert.throws(() => m.exportOptimizerState(), /ZeRO-1 slice/);
  await assert.rejects(m.step(f.opt), /ZeRO-1 slice of the AdamW moments; step it with rs_model_shard_step/);
  assert.throws(() => m.readMoments(0, 5), /outside this rank's ZeRO-1 slice \[10, \+/);
  assert.throws(() => m.shardOptimizer(n, 1), /count/);
  // Control: the same slice stepped with twice the norm clips harder, so its first moment differs.
  const firstMoment = async (norm: number) => {
    const k = PolicyModel.create(f.cfg, { seed: f.seed, threads: 1 });
    k.shardOptimizer(0, n);
    k.setGrads(g);
    await k.shardStep(f.opt, norm);
    const { m: mo } = k.readMoments(0, n);
    k.dispose();
    return mo;
  };
  const norm = Math.sqrt(g.reduce((a, x) => a + x * x, 0));
  assert.notDeepEqual(await firstMoment(norm), await firstMoment(2 * norm));
  // A non-finite norm skips the step: nothing moves, the grads are zeroed.
  const k = PolicyModel.create(f.cfg, { seed: f.seed, threads: 1 });
  k.setGrads(g);
  const s = await k.shardStep(f.opt, Number.NaN);
  assert.equal(s.skipped, true);
  assert.deepEqual(k.getParams(), p0);
  k.dispose();
  // Back to the whole state: the moments outside the old slice start at zero, and rs_model_step works again.
  m.shardOptimizer(0, n);
  assert.equal(m.exportOptimizerState().m.length, n);
  await m.step(f.opt);
  m.dispose();
});

test("a learner group's first state carries no moments: every rank starts zeros on its slice, none holds them whole", async () => {
  const f = fixture();
  const a = await withGrads(f, 2); // trained: its moments are not zero
  const counters = { step: 0, sftDone: true, readerSeq: 0, droppedStale: 0, samplesSeen: 0, optimizerStep: 0 };
  const fresh = encodeTrainState(a, counters, null, "", "fresh");
  const full = encodeTrainState(a, counters);
  assert.ok(fresh.length < full.length / 2, `no moments written (${fresh.length} vs ${full.length} bytes)`);
  const b = PolicyModel.create(f.cfg, { seed: 99, threads: 1 });
  await withTrainedMoments(b, f);
  b.shardOptimizer(5, 100);
  decodeTrainStateWithLora(b, fresh);
  assert.deepEqual(b.getParams(), a.getParams(), "the weights come from the state");
  assert.ok(b.readMoments(5, 100).m.every((x) => x === 0) && b.exportStepCount() === 0, "zero moments, step 0");
  // Control: the full state gives the slice of the trained moments.
  decodeTrainStateWithLora(b, full);
  assert.deepEqual(b.readMoments(5, 100).v, a.exportOptimizerState().v.subarray(5, 105));
  a.dispose();
  b.dispose();
});

test("a state's moments split off (followers take only their slice): the rest decodes to the same weights and counters", async () => {
  const f = fixture();
  const a = await withGrads(f, 2);
  await a.step(f.opt);
  const counters = { step: 7, sftDone: true, readerSeq: 3, droppedStale: 1, samplesSeen: 9, optimizerStep: 2 };
  const full = encodeTrainState(a, counters);
  const split = splitMoments(full)!;
  const opt = a.exportOptimizerState();
  assert.deepEqual([split.m, split.v, split.step], [opt.m, opt.v, 2]);
  assert.ok(split.slim.length < full.length / 2, "the moments left the state");
  const b = PolicyModel.create(f.cfg, { seed: 5, threads: 1 });
  assert.deepEqual(decodeTrainStateWithLora(b, split.slim).counters, counters);
  assert.deepEqual(b.getParams(), a.getParams());
  assert.ok(
    b.exportOptimizerState().m.every((x) => x === 0),
    "zero moments until the slices arrive",
  );
  assert.equal(splitMoments(split.slim), null, "nothing left to split (control)");
  a.dispose();
  b.dispose();
});

async function withTrainedMoments(m: PolicyModel, f: ReturnType<typeof fixture>): Promise<void> {
  for (const mb of f.packed.microBatches) await m.accumulate(mb, f.spec, f.packed.lossTokens);
  await m.step(f.opt);
}
