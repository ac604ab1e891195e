// Admission between tasks: with the batch full, "fair" lets the task with the fewest sequences in flight in next,
// so a task that queued three groups cannot keep a later task out until all three ran; "fcfs" (the positive
// control) keeps arrival order. Admission order never changes what a request gets: its seed decides its tokens.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel } from "../../kernels/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { PolicyEngine } from "../../actors/runtime/policy-engine.js";
import { groupWaiting, nextGroup } from "../../actors/runtime/engine-admission.js";
import type { Generation, SamplingArgs } from "../../environments/api/index.js";

const tok = new ByteTokenizer();
const config = {
  vocabSize: 288,
  hiddenSize: 32,
  intermediateSize: 64,
  numLayers: 1,
  numHeads: 2,
  numKvHeads: 1,
  maxPositionEmbeddings: 128,
  rmsNormEps: 1e-5,
  ropeTheta: 10000,
  tieWordEmbeddings: true,
  attentionBias: false,
};
const sampling: SamplingArgs = { temperature: 1, topP: 1, topK: 0, maxTokens: 12 };
const prompt = (text: string) => tok.applyChatTemplate([{ role: "user", content: text }], { addGenerationPrompt: true });

/** Task a asks for three groups of 4, then task b for one, in the same tick; 4 sequences fit in the batch. */
async function runTwoTasks(admission: "fair" | "fcfs") {
  const m = PolicyModel.create(config, { seed: 1, threads: 1 });
  try {
    const engine = new PolicyEngine(m, tok, 0, { seed: 7, kvBlocks: 64, maxSeqs: 4, admission });
    const a = engine.client(1000);
    const b = engine.client(2000);
    const done: string[] = [];
    const results = new Map<string, Generation>();
    const ask = (client: typeof a, name: string) =>
      client.generate(prompt(name), sampling).then((g) => {
        done.push(name);
        results.set(`${name}#${done.filter((d) => d === name).length}`, g);
      });
    const calls: Promise<void>[] = [];
    for (const group of ["a1", "a2", "a3"]) for (let i = 0; i < 4; i++) calls.push(ask(a, group));
    for (let i = 0; i < 4; i++) calls.push(ask(b, "b1"));
    await Promise.all(calls);
    await engine.dispose();
    return { done, results };
  } finally {
    m.dispose();
  }
}

test("fair admission: a later task runs after the first group of one that queued three, not after all three", async () => {
  const fair = await runTwoTasks("fair");
  const lastB = fair.done.lastIndexOf("b1");
  assert.equal(fair.done.slice(0, 4).join(), "a1,a1,a1,a1", `the first group runs first (${fair.done})`);
  assert.equal(lastB, 7, `b's group is the second to run (${fair.done})`);
  const fcfs = await runTwoTasks("fcfs");
  assert.equal(fcfs.done.indexOf("b1"), 12, `fcfs (the control) runs b last (${fcfs.done})`);
  // Same requests, same seeds (each client's counter), same tokens, whatever the order.
  for (const [k, g] of fair.results) {
    const h = fcfs.results.get(k);
    assert.ok(h, k);
    assert.deepEqual(g.tokenIds, h.tokenIds, `${k}: tokens`);
  }
});

test("a group larger than the engine's sequences runs in chunks instead of failing", async () => {
  const m = PolicyModel.create(config, { seed: 1, threads: 1 });
  try {
    const engine = new PolicyEngine(m, tok, 0, { seed: 7, kvBlocks: 64, maxSeqs: 3 });
    const client = engine.client(5);
    const gens = await Promise.all(Array.from({ length: 8 }, () => client.generate(prompt("eight"), sampling)));
    assert.equal(gens.length, 8);
    for (const g of gens) assert.ok(g.tokenIds.length > 0);
    await engine.dispose();
  } finally {
    m.dispose();
  }
});

test("groupWaiting and nextGroup: equal keys together in chunks, the least-loaded owner first, oldest among equals", () => {
  const w = (key: string, owner: number) => ({ key, owner });
  const groups = groupWaiting([w("x", 0), w("y", 1), w("x", 0), w("x", 0), w("z", 2)], 2);
  assert.deepEqual(
    groups.map((g) => g.map((r) => r.key).join("")),
    ["xx", "y", "x", "z"],
  );
  const standing = new Map([
    [0, { inFlight: 3, lastAdmitted: 0 }],
    [1, { inFlight: 1, lastAdmitted: 5 }],
    [2, { inFlight: 1, lastAdmitted: 5 }],
  ]);
  const of = (o: number) => standing.get(o)!;
  assert.equal(nextGroup(groups, of, "fair"), 1, "owners 1 and 2 tie: the older request (y) first");
  standing.set(1, { inFlight: 1, lastAdmitted: 9 });
  assert.equal(nextGroup(groups, of, "fair"), 3, "owner 2 was admitted less recently than owner 1");
  standing.set(0, { inFlight: 0, lastAdmitted: 10 });
  assert.equal(nextGroup(groups, of, "fair"), 0, "fewest in flight first, however recently admitted");
  assert.equal(nextGroup(groups, of, "fcfs"), 0);
  assert.equal(nextGroup([], of, "fair"), -1);
});
