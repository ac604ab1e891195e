// The inference actor's engine as a continuous-batching scheduler over the kernels' step engine: every request
// gets exactly the tokens and logprobs of generating it alone with its seed, whenever it arrives and whatever runs
// beside it; a task's group is prefilled once and a multi-turn continuation reuses its conversation's KV; new weights
// apply at the next step boundary and only later tokens carry the new version (barrier: none of a running
// generation's); an aborted request leaves the batch; the KV pool is never exceeded under a burst.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel } from "../../kernels/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { PolicyEngine, type PolicyEngineOptions } from "../../actors/runtime/policy-engine.js";
import type { Generation, SamplingArgs } from "../../environments/api/index.js";
import { mulberry32 } from "../helpers/rng.js";

const tok = new ByteTokenizer();
const config = {
  vocabSize: 288,
  hiddenSize: 64,
  intermediateSize: 128,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  maxPositionEmbeddings: 256,
  rmsNormEps: 1e-5,
  ropeTheta: 10000,
  tieWordEmbeddings: true,
  attentionBias: false,
};
const sampling: SamplingArgs = { temperature: 1, topP: 1, topK: 0, maxTokens: 40 };

function model(seed = 1): PolicyModel {
  return PolicyModel.create(config, { seed, threads: 1 });
}

function promptOf(text: string): number[] {
  return tok.applyChatTemplate([{ role: "user", content: text }], { addGenerationPrompt: true });
}

/** What the batch API gives the request alone (CPU: itself a loop over the step engine, one sequence). */
async function alone(m: PolicyModel, prompt: number[], args: SamplingArgs, seed: number) {
  const [r] = await m.generate({
    prompts: [Int32Array.from(prompt)],
    seeds: [seed],
    maxNewTokens: args.maxTokens,
    temperature: args.temperature,
    topP: args.topP,
    topK: args.topK,
    eosTokenId: tok.stopTokenIds(),
  });
  return { tokenIds: Array.from(r!.tokens), logprobs: Array.from(r!.logprobs), stopReason: r!.stopReason };
}

function same(g: Generation, ref: { tokenIds: number[]; logprobs: number[]; stopReason: string }, what: string): void {
  assert.deepEqual(g.tokenIds, ref.tokenIds, `${what}: tokens`);
  assert.deepEqual(g.logprobs, ref.logprobs, `${what}: logprobs (bitwise)`);
  assert.equal(g.stopReason, ref.stopReason, `${what}: stop reason`);
}

const nextTick = () => new Promise<void>((r) => setImmediate(r));

async function until(what: string, cond: () => boolean): Promise<void> {
  for (let i = 0; !cond(); i++) {
    assert.ok(i < 200_000, `never: ${what}`);
    await nextTick();
  }
}

test("every request gets the tokens and logprobs of generating it alone, groups and turns arriving at any time", async () => {
  const m = model();
  try {
    const engine = new PolicyEngine(m, tok, 0, { seed: 5, kvBlocks: 256, maxSeqs: 24 });
    const rnd = mulberry32(3);
    const jobs: Array<{ prompt: number[]; args: SamplingArgs; seed: number; at: number }> = [];
    for (let task = 0; task < 4; task++) {
      const prompt = promptOf(`task ${task}: ${"abc".repeat(1 + Math.floor(rnd() * 12))}`);
      const args = { ...sampling, maxTokens: 8 + Math.floor(rnd() * 40), temperature: task === 3 ? 0 : 1, topK: task === 2 ? 7 : 0 };
      // A task's group of 4 arrives together (one engine request); tasks arrive 0..60 ms apart.
      for (let i = 0; i < 4; i++) jobs.push({ prompt, args, seed: 100 * task + i, at: task * 20 });
    }
    // One timer per task, its four calls made in the same tick: timers due at the same millisecond can fire in
    // different turns of a busy event loop, and a group split that way is (correctly) two engine requests.
    const byTask = [0, 1, 2, 3].map((task) => jobs.filter((_, i) => Math.floor(i / 4) === task));
    const groups = byTask.map((group) =>
      new Promise<void>((r) => setTimeout(r, group[0]!.at)).then(() => Promise.all(group.map((j) => engine.client(j.seed).generate(j.prompt, j.args)))),
    );
    const gens = (await Promise.all(groups)).flat();
    for (let i = 0; i < jobs.length; i++) same(gens[i]!, await alone(m, jobs[i]!.prompt, jobs[i]!.args, jobs[i]!.seed), `request ${i}`);
    assert.ok(new Set(gens.slice(0, 4).map((g) => g.tokenIds.join())).size > 1, "a group's seeds give different completions");
    assert.ok(gens.every((g) => g.policyVersion === 0 && g.versionSpans === undefined));
    // Each group of 4 was prefilled once: 3 of every 4 prompt tokens were shared.
    const s = engine.engineStats()!;
    assert.equal(s.preemptions, 0);
    assert.equal(
      s.sharedPromptTokens,
      jobs.filter((_, i) => i % 4 !== 0).reduce((n, j) => n + j.prompt.length, 0),
    );

    // A second turn (the conversation so far + a new user turn) reuses the blocks of the first.
    const first = gens[0]!;
    const convo = [...jobs[0]!.prompt, ...first.tokenIds, ...promptOf("and now?")];
    const before = engine.engineStats()!;
    const second = await engine.client(7).generate(convo, sampling);
    const after = engine.engineStats()!;
    same(second, await alone(m, convo, sampling, 7), "second turn");
    const reused = after.prefixHitTokens - before.prefixHitTokens;
    const computed = jobs[0]!.prompt.length + first.tokenIds.length - 1;
    assert.equal(reused, Math.floor(computed / 16) * 16, "every full block of the first turn is found");
    assert.equal(after.prefillRows - before.prefillRows, convo.length - reused);
    await engine.dispose();
  } finally {
    m.dispose();
  }
});

test("a task's group is prefilled once; the same prompt from two tasks arriving apart shares the cache", async () => {
  const m = model();
  try {
    const engine = new PolicyEngine(m, tok, 0, { seed: 1 });
    const prompt = promptOf("x".repeat(70));
    const client = engine.client(40);
    await Promise.all(Array.from({ length: 8 }, () => client.generate(prompt, sampling)));
    const s = engine.engineStats()!;
    assert.equal(s.promptTokens, 8 * prompt.length);
    assert.equal(s.prefillRows, prompt.length, "one prefill for the group of 8");
    assert.ok(engine.figures().prefixHitRate >= 7 / 8 - 1e-9, `hit rate ${engine.figures().prefixHitRate}`);
    // Another task on the same prompt, later: its full blocks before the last prompt token come from the cache.
    await Promise.all(Array.from({ length: 8 }, () => engine.client(90).generate(prompt, sampling)));
    const t = engine.engineStats()!;
    assert.equal(t.prefixHitTokens - s.prefixHitTokens, Math.floor((prompt.length - 1) / 16) * 16);
    assert.equal(t.prefillRows - s.prefillRows, prompt.length - Math.floor((prompt.length - 1) / 16) * 16);
    await engine.dispose();
  } finally {
    m.dispose();
  }
});

async function midGeneration(opts: PolicyEngineOptions, swapAfterTokens: number) {
  const m = model();
  const next = model(2).toSafetensors();
  const applied: Array<{ version: number; steps: number; waitedMs: number }> = [];
  const engine = new PolicyEngine(m, tok, 0, { seed: 1, ...opts, onWeightsApplied: (w) => applied.push(w) });
  const prompt = promptOf("count");
  const args = { ...sampling, maxTokens: 60, temperature: 0.7 };
  const ref = await alone(m, prompt, args, 11);
  const running = engine.client(11).generate(prompt, args);
  await until("tokens generated", () => engine.generatedTokens >= swapAfterTokens);
  const atSwap = engine.generatedTokens;
  engine.swapWeights(1, next);
  const later = engine.client(12).generate(prompt, args);
  const [g, l] = await Promise.all([running, later]);
  await engine.dispose();
  m.dispose();
  return { g, l, ref, atSwap, applied };
}

test("keep and recompute: new weights apply at the next step boundary; only later tokens carry the new version", async () => {
  for (const weightUpdate of ["keep", "recompute"] as const) {
    const { g, l, ref, atSwap, applied } = await midGeneration({ weightUpdate }, 10);
    assert.equal(applied.length, 1);
    assert.ok(applied[0]!.steps <= 1, `${weightUpdate}: applied ${applied[0]!.steps} steps after the swap (at most one)`);
    const k = g.versionSpans?.[0]?.end ?? -1;
    assert.ok(k >= atSwap && k <= atSwap + 1, `${weightUpdate}: the switch at token ${k}, the swap came after ${atSwap}`);
    assert.deepEqual(g.versionSpans, [
      { version: 0, start: 0, end: k },
      { version: 1, start: k, end: g.tokenIds.length },
    ]);
    assert.equal(g.policyVersion, 0);
    // Tokens before the switch are those of the old weights alone; the request that came after runs on the new ones.
    assert.deepEqual(g.tokenIds.slice(0, k), ref.tokenIds.slice(0, k), `${weightUpdate}: tokens before the switch`);
    assert.notDeepEqual(g.logprobs.slice(k), ref.logprobs.slice(k, g.tokenIds.length), `${weightUpdate}: later tokens come from the new weights`);
    assert.equal(l.policyVersion, 1);
    assert.equal(l.versionSpans, undefined);
  }
});

test("barrier: a running generation finishes under the old weights; a request arriving meanwhile waits for the new ones", async () => {
  const { g, l, ref, applied } = await midGeneration({ weightUpdate: "barrier" }, 10);
  same(g, ref, "the running generation");
  assert.equal(g.versionSpans, undefined);
  assert.equal(g.policyVersion, 0);
  assert.equal(l.policyVersion, 1);
  assert.ok(applied[0]!.steps >= ref.tokenIds.length - 11, `the swap waited for the running sequence (${applied[0]!.steps} steps)`);
});

test("an aborted request leaves the batch at the next step; the others are unchanged", async () => {
  const m = model();
  try {
    const engine = new PolicyEngine(m, tok, 0, { seed: 1 });
    const prompt = promptOf("long");
    const args = { ...sampling, maxTokens: 80 };
    const stop = new AbortController();
    const doomed = engine.client(1).generate(prompt, args, stop.signal);
    const kept = engine.client(2).generate(promptOf("other"), args);
    await until("started", () => engine.generatedTokens >= 6);
    stop.abort();
    await assert.rejects(doomed, /generation aborted/);
    same(await kept, await alone(m, promptOf("other"), args, 2), "the request beside it");
    const s = engine.engineStats()!;
    assert.equal(s.blocksUsed, 0, "the aborted sequence's blocks are free");
    assert.ok(s.tokensGenerated < 80 + (await kept).tokenIds.length, "the aborted sequence stopped early");
    await assert.rejects(engine.client(3).generate(prompt, args, stop.signal), /generation aborted/);
    await engine.dispose();
  } finally {
    m.dispose();
  }
});

test("a burst of long requests stays inside the configured KV blocks: requests wait, none fails", async () => {
  const m = model();
  try {
    const kvBlocks = 14;
    const engine = new PolicyEngine(m, tok, 0, { seed: 1, kvBlocks, kvBlockSize: 16, maxSeqs: 8 });
    const args = { ...sampling, maxTokens: 100, temperature: 1 };
    const prompts = Array.from({ length: 10 }, (_, i) => promptOf(`${i}`.repeat(20 + i)));
    let maxUsed = 0;
    let maxWaiting = 0;
    let done = false;
    const watch = (async () => {
      while (!done) {
        const f = engine.figures();
        maxUsed = Math.max(maxUsed, f.kvBlocksUsed);
        maxWaiting = Math.max(maxWaiting, f.waiting);
        if (engine.engineStats()) assert.equal(f.kvBlocksUsed + f.kvBlocksCached + f.kvBlocksFree, kvBlocks);
        await nextTick();
      }
    })();
    const gens = await Promise.all(prompts.map((p, i) => engine.client(i).generate(p, args)));
    done = true;
    await watch;
    assert.ok(maxUsed <= kvBlocks && maxUsed > kvBlocks / 2, `blocks used peaked at ${maxUsed} of ${kvBlocks}`);
    assert.ok(maxWaiting > 0, "the burst had to wait");
    console.log(`burst: ${engine.engineStats()!.preemptions} preemptions, at most ${maxWaiting} waiting, ${maxUsed} of ${kvBlocks} blocks used`);
    for (let i = 0; i < prompts.length; i++) same(gens[i]!, await alone(m, prompts[i]!, args, i), `request ${i}`);
    // A request that could not fit in the pool alone is refused, naming the pool.
    await assert.rejects(engine.client(1).generate(prompts[0]!, { ...args, maxTokens: 250 }), /KV blocks of 16, the pool has 14/);
    await engine.dispose();
  } finally {
    m.dispose();
  }
});

test("dispose mid-generation: unfinished requests fail, the step in flight ends first, then the model can go", async () => {
  const m = model();
  const engine = new PolicyEngine(m, tok, 0, { seed: 1 });
  const pending = Array.from({ length: 4 }, (_, i) => engine.client(i).generate(promptOf(`${i}`), { ...sampling, maxTokens: 200 }));
  const settled = Promise.allSettled(pending);
  await until("decoding", () => engine.generatedTokens >= 8);
  await engine.dispose();
  for (const r of await settled) assert.match(String(r.status === "rejected" ? r.reason : "fulfilled"), /the policy engine was disposed/);
  m.dispose();
});
