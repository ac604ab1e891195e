// The step-level engine (rs_engine_*): continuous batching gives every sequence the exact bits (tokens, logprobs,
// policy logprobs) of running it alone with the same seed, whatever the arrival order, chunking, sharing,
// preemption or cache hits; groups share their prompt's blocks copy-on-write and prefill it once; a multi-turn
// continuation reuses the conversation's KV; a weights version change marks later tokens and never lets a block
// computed under the old version be read under the new one (positive control: cacheAcrossVersions does read it);
// memory stays inside the pool under a burst.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type EngineOptions, type EngineRequest, type InferenceEngine, PolicyModel, versionSpans } from "../../kernels/index.js";
import { randomWeights } from "../reference/llama-f64.js";
import { flatParams, mulberry32, randInts, tinyConfig } from "./helpers.js";

// hd = 16 so the attention's vector paths (8 lanes) run, GQA 4/2, a vocab the samples spread over.
const cfg = tinyConfig({
  vocabSize: 61,
  hiddenSize: 64,
  intermediateSize: 96,
  numHeads: 4,
  numKvHeads: 2,
  maxPositionEmbeddings: 160,
  attentionBias: true,
  tieWordEmbeddings: false,
});

function makeModel(weightSeed = 11): PolicyModel {
  const m = PolicyModel.create(cfg, { seed: 3, threads: 2 });
  m.setParams(flatParams(m, randomWeights(cfg, weightSeed)));
  return m;
}

interface Completion {
  tokens: number[];
  logprobs: number[];
  policyLogprobs: number[];
  versions: number[];
  stopReason?: string;
}

/** Steps until nothing runs or waits; `arrivals[s]` are added just before step s. Returns completions by id. */
async function drive(engine: InferenceEngine, arrivals: Map<number, EngineRequest[]>, ids: number[][] = [], onStep?: (s: number) => void) {
  const out = new Map<number, Completion>();
  const last = Math.max(0, ...arrivals.keys());
  for (let s = 0; ; s++) {
    for (const r of arrivals.get(s) ?? []) {
      const got = engine.add(r);
      ids.push(got);
      for (const id of got) out.set(id, { tokens: [], logprobs: [], policyLogprobs: [], versions: [] });
    }
    onStep?.(s);
    const st = engine.stats();
    if (s > last && st.running === 0 && st.waiting === 0) break;
    const r = await engine.step();
    for (const t of r.tokens) {
      const c = out.get(t.seqId)!;
      assert.equal(t.index, c.tokens.length, `seq ${t.seqId}: tokens arrive in order`);
      c.tokens.push(t.token);
      c.logprobs.push(t.logprob);
      c.policyLogprobs.push(t.policyLogprob);
      c.versions.push(t.version);
    }
    for (const f of r.finished) {
      const c = out.get(f.seqId)!;
      c.stopReason = f.stopReason;
      assert.equal(f.tokens, c.tokens.length);
    }
    assert.ok(s < 5000, "the engine stopped making progress");
  }
  return out;
}

/** Each completion of each request run alone on a fresh engine (one seed at a time). */
async function alone(model: PolicyModel, reqs: EngineRequest[], opts: Partial<EngineOptions> = {}): Promise<Completion[][]> {
  const res: Completion[][] = [];
  for (const r of reqs) {
    const per: Completion[] = [];
    for (const seed of r.seeds) {
      const e = model.createEngine({ nBlocks: 64, ...opts });
      const ids: number[][] = [];
      const got = await drive(e, new Map([[0, [{ ...r, seeds: [seed] }]]]), ids);
      per.push(got.get(ids[0][0])!);
      e.dispose();
    }
    res.push(per);
  }
  return res;
}

/** Bitwise: Float32 values become the same doubles exactly when their bits are equal (no NaNs here). */
function sameBits(a: Completion, b: Completion, what: string): void {
  assert.deepEqual(a.tokens, b.tokens, `${what}: tokens`);
  assert.deepEqual(a.logprobs, b.logprobs, `${what}: logprobs`);
  assert.deepEqual(a.policyLogprobs, b.policyLogprobs, `${what}: policy logprobs`);
  assert.equal(a.stopReason, b.stopReason, `${what}: stop reason`);
}

function requests(n: number, seed: number): EngineRequest[] {
  const rnd = mulberry32(seed);
  return Array.from({ length: n }, (_, i) => ({
    prompt: randInts(1 + Math.floor(rnd() * 45), seed * 100 + i, cfg.vocabSize),
    seeds: [1000 + i],
    maxNewTokens: 4 + Math.floor(rnd() * 30),
    temperature: i % 4 === 3 ? 0 : 1,
    topP: i % 3 === 1 ? 0.9 : 1,
    topK: i % 5 === 2 ? 7 : 0,
    eosTokenId: i % 2 ? 5 : undefined,
  }));
}

function collectAll(reqs: EngineRequest[], ids: number[][], got: Map<number, Completion>): Completion[] {
  assert.equal(ids.length, reqs.length);
  return ids.map((x) => got.get(x[0])!);
}

test("continuous batching gives each sequence exactly its tokens and logprobs alone, at every arrival order", async () => {
  const model = makeModel();
  const reqs = requests(8, 1);
  const ref = await alone(model, reqs);
  // The batch API is a loop over the engine: the same bits.
  for (let i = 0; i < reqs.length; i++) {
    const [g] = await model.generate({ ...reqs[i], prompts: [reqs[i].prompt], seeds: reqs[i].seeds, eosTokenId: reqs[i].eosTokenId });
    sameBits(
      { tokens: [...g.tokens], logprobs: [...g.logprobs], policyLogprobs: [...g.policyLogprobs], versions: [], stopReason: g.stopReason },
      ref[i][0],
      `generate ${i}`,
    );
  }
  const rnd = mulberry32(7);
  const orders: Array<{ name: string; at: (i: number) => number; opts: Partial<EngineOptions> }> = [
    { name: "all at once", at: () => 0, opts: {} },
    { name: "one per step", at: (i) => i, opts: {} },
    { name: "reversed, every third step", at: (i) => 3 * (reqs.length - 1 - i), opts: {} },
    // A small pool (preemption by recompute) and 5 prompt rows per step (prompts split over steps).
    { name: "random, small pool, chunked prefill", at: () => Math.floor(rnd() * 12), opts: { nBlocks: 9, maxPrefillTokens: 5, maxSeqs: 5 } },
  ];
  for (const o of orders) {
    const engine = model.createEngine({ nBlocks: 64, ...o.opts });
    const arrivals = new Map<number, EngineRequest[]>();
    const order: number[] = [];
    reqs.forEach((r, i) => {
      const s = o.at(i);
      arrivals.set(s, [...(arrivals.get(s) ?? []), r]);
    });
    [...arrivals.keys()]
      .sort((a, b) => a - b)
      .forEach((s) => {
        for (const r of arrivals.get(s)!) order.push(reqs.indexOf(r));
      });
    const ids: number[][] = [];
    const got = await drive(engine, arrivals, ids);
    ids.forEach((x, k) => sameBits(got.get(x[0])!, ref[order[k]][0], `${o.name}: request ${order[k]}`));
    const st = engine.stats();
    if (o.opts.nBlocks === 9) assert.ok(st.preemptions > 0, `${o.name}: the pool was meant to force preemption (${st.preemptions})`);
    assert.equal(st.blocksUsed, 0);
    engine.dispose();
  }
  model.dispose();
});

test("a group's completions share the prompt's blocks copy-on-write: prefilled once, each equal to running alone", async () => {
  const model = makeModel();
  const prompt = randInts(37, 5, cfg.vocabSize); // two full blocks of 16 and a partial one the completions write into
  const group: EngineRequest = { prompt, seeds: [1, 2, 3, 4, 5, 6, 7, 8], maxNewTokens: 20, temperature: 1 };
  const [ref] = await alone(model, [group]);
  const shared = model.createEngine({ nBlocks: 64 });
  const ids: number[][] = [];
  const got = await drive(shared, new Map([[0, [group]]]), ids);
  ids[0].forEach((id, i) => sameBits(got.get(id)!, ref[i], `completion ${i}`));
  assert.ok(new Set(ref.map((c) => c.tokens.join())).size > 1, "the seeds give different completions");
  const s = shared.stats();
  assert.equal(s.promptTokens, 8 * 37);
  assert.equal(s.sharedPromptTokens, 7 * 37);
  assert.ok(s.cowCopies >= 7, `the partial block was copied before each write (${s.cowCopies})`);
  // The same prompt as 8 requests that cannot share (distinct salts): 8 times the prefill rows.
  const apart = model.createEngine({ nBlocks: 64 });
  await drive(apart, new Map([[0, group.seeds.map((seed, i) => ({ ...group, seeds: [seed], cacheSalt: i + 1 }))]]));
  const a = apart.stats();
  console.log(
    `prefill rows, group of 8 on a 37-token prompt: shared ${s.prefillRows}, unshared ${a.prefillRows} (${(s.prefillRows / a.prefillRows).toFixed(4)}x)`,
  );
  assert.equal(s.prefillRows, 37);
  assert.equal(a.prefillRows, 8 * 37);
  shared.dispose();
  apart.dispose();
  model.dispose();
});

test("a multi-turn continuation reuses the conversation's cached blocks and still gives the bits of running alone", async () => {
  const model = makeModel();
  const engine = model.createEngine({ nBlocks: 64 });
  const first: EngineRequest = { prompt: randInts(21, 8, cfg.vocabSize), seeds: [3], maxNewTokens: 30, temperature: 1 };
  const ids: number[][] = [];
  const t1 = (await drive(engine, new Map([[0, [first]]]), ids)).get(ids[0][0])!;
  const convo = Int32Array.from([...first.prompt, ...t1.tokens, ...randInts(9, 9, cfg.vocabSize)]);
  const second: EngineRequest = { prompt: convo, seeds: [4], maxNewTokens: 12, temperature: 1 };
  const before = engine.stats();
  const ids2: number[][] = [];
  const t2 = (await drive(engine, new Map([[0, [second]]]), ids2)).get(ids2[0][0])!;
  const after = engine.stats();
  const hit = after.prefixHitTokens - before.prefixHitTokens;
  // The first turn computed KV for its prompt and all but its last token: every full block of that is found.
  const computed = first.prompt.length + t1.tokens.length - 1;
  assert.equal(hit, Math.floor(computed / 16) * 16, `prefix hit tokens ${hit}`);
  assert.equal(after.prefillRows - before.prefillRows, convo.length - hit);
  const [[ref]] = await alone(model, [second]);
  sameBits(t2, ref, "second turn");
  engine.dispose();
  model.dispose();
});

test("a weights update mid-generation: later tokens carry the new version; old-version blocks are never read under the new one", async () => {
  const model = makeModel();
  const newParams = flatParams(model, randomWeights(cfg, 12));
  const oldParams = model.getParams();
  const req: EngineRequest = { prompt: randInts(40, 13, cfg.vocabSize), seeds: [9], maxNewTokens: 24, temperature: 1 };
  const later: EngineRequest = { ...req, seeds: [10] };
  // Reference for the request added after the update: alone, fresh, under the new weights.
  model.setParams(newParams);
  const [[laterRef]] = await alone(model, [later]);
  model.setParams(oldParams);
  for (const across of [false, true]) {
    const engine = model.createEngine({ nBlocks: 64, cacheAcrossVersions: across });
    const ids: number[][] = [];
    const arrivals = new Map<number, EngineRequest[]>([
      [0, [req]],
      [8, [later]],
    ]);
    const got = await drive(engine, arrivals, ids, (s) => {
      if (s !== 8) return;
      model.setParams(newParams);
      engine.setVersion(1, "keep");
    });
    const c = got.get(ids[0][0])!;
    // Step 0 prefilled and sampled token 0; steps 1-7 sampled tokens 1-7 under version 0, then version 1.
    assert.deepEqual(versionSpans(c.versions), [
      { version: 0, start: 0, end: 8 },
      { version: 1, start: 8, end: c.tokens.length },
    ]);
    const l = got.get(ids[1][0])!;
    assert.ok(l.versions.every((v) => v === 1));
    const hits = engine.stats().prefixHitTokens;
    if (!across) {
      assert.equal(hits, 0, "no block computed under version 0 is found under version 1");
      sameBits(l, laterRef, "request added after the update");
    } else {
      // Positive control: sharing across versions does find the old prompt blocks, and the output changes.
      assert.equal(hits, 32);
      assert.notDeepEqual(l.logprobs, laterRef.logprobs, "reading version-0 KV changes what the later request samples");
    }
    model.setParams(oldParams);
    engine.dispose();
  }
  model.dispose();
});

test("recompute on a weights update: running sequences are prefilled again under the new weights", async () => {
  const model = makeModel();
  const newParams = flatParams(model, randomWeights(cfg, 12));
  const engine = model.createEngine({ nBlocks: 64 });
  const req: EngineRequest = { prompt: randInts(30, 14, cfg.vocabSize), seeds: [5, 6], maxNewTokens: 16, temperature: 1 };
  const ids: number[][] = [];
  let rowsAtSwitch = 0;
  const got = await drive(engine, new Map([[0, [req]]]), ids, (s) => {
    if (s !== 5) return;
    rowsAtSwitch = engine.stats().prefillRows;
    model.setParams(newParams);
    engine.setVersion(7, "recompute");
  });
  for (const id of ids[0]) {
    const c = got.get(id)!;
    assert.deepEqual(versionSpans(c.versions), [
      { version: 0, start: 0, end: 5 },
      { version: 7, start: 5, end: 16 },
    ]);
  }
  // Both sequences computed their 30 + 5 tokens again (nothing cached under version 7 yet: the first one's
  // blocks are offered only after the step that computes them).
  assert.equal(engine.stats().prefillRows - rowsAtSwitch, 2 * 35);
  engine.dispose();
  model.dispose();
});

test("a burst of long requests stays inside the pool: requests wait, none fails, each equal to running alone", async () => {
  const model = makeModel();
  const nBlocks = 14;
  const engine = model.createEngine({ nBlocks, maxSeqs: 6 });
  const reqs: EngineRequest[] = Array.from({ length: 10 }, (_, i) => ({
    prompt: randInts(30 + i, 40 + i, cfg.vocabSize),
    seeds: [i + 1],
    maxNewTokens: 60,
    temperature: 1,
  }));
  const ids: number[][] = [];
  let maxWaiting = 0;
  const got = await drive(engine, new Map([[0, reqs]]), ids, () => {
    const s = engine.stats();
    assert.ok(s.blocksUsed <= nBlocks);
    assert.equal(s.blocksUsed + s.blocksCachedIdle + s.blocksFree, nBlocks);
    maxWaiting = Math.max(maxWaiting, s.waiting);
  });
  assert.ok(maxWaiting > 0, "the burst had to wait");
  const ref = await alone(model, reqs);
  collectAll(reqs, ids, got).forEach((c, i) => {
    assert.equal(c.stopReason, "length");
    sameBits(c, ref[i][0], `request ${i}`);
  });
  engine.dispose();
  // A request that could not fit alone is refused at once, naming the pool.
  const tiny = model.createEngine({ nBlocks: 4 });
  assert.throws(() => tiny.add({ prompt: randInts(100, 1, cfg.vocabSize), seeds: [1], maxNewTokens: 200 }), /needs 10 KV blocks of 16, the pool has 4/);
  tiny.dispose();
  model.dispose();
});

test("cancel: a group's first completion cancelled mid-prefill hands the prefill on; a cancelled sequence frees its blocks", async () => {
  const model = makeModel();
  const group: EngineRequest = { prompt: randInts(45, 21, cfg.vocabSize), seeds: [1, 2, 3], maxNewTokens: 10, temperature: 1 };
  const [ref] = await alone(model, [group]);
  const engine = model.createEngine({ nBlocks: 64, maxPrefillTokens: 10 });
  const ids: number[][] = [];
  const got = await drive(engine, new Map([[0, [group]]]), ids, (s) => {
    if (s === 2) engine.cancel(ids[0][0]);
  });
  assert.equal(got.get(ids[0][0])!.tokens.length, 0);
  sameBits(got.get(ids[0][1])!, ref[1], "completion 1");
  sameBits(got.get(ids[0][2])!, ref[2], "completion 2");
  assert.equal(engine.stats().prefillRows, 45, "the prefill went on where it was");
  const [id] = engine.add({ ...group, seeds: [4] });
  await engine.step();
  assert.ok(engine.stats().blocksUsed > 0);
  engine.cancel(id);
  assert.equal(engine.stats().blocksUsed, 0);
  assert.throws(() => engine.cancel(id), /no sequence/);
  engine.dispose();
  model.dispose();
});
