import { test } from "node:test";
import assert from "node:assert/strict";
import { loadEnvironment } from "../../environments/arithmetic/index.js";
import { workedSolution } from "../../environments/arithmetic/worked.js";
import type { DatasetRow, Environment, RolloutResult } from "../../environments/api/index.js";
import { ByteChatTokenizer, ScriptedModelClient } from "../../environments/testing/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";

const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 128 };

async function scoreReplies(env: Environment, row: DatasetRow, replies: string[]) {
  const model = new ScriptedModelClient(new ByteChatTokenizer(), replies);
  const rollouts: RolloutResult[] = [];
  for (let i = 0; i < replies.length; i++) rollouts.push(await env.rollout({ model, sampling }, row));
  return env.scoreGroup(rollouts, row, {});
}

test("arithmetic: name/version from package.json; short single-message prompts; deterministic rows", async () => {
  const env = await loadEnvironment({ seed: 1 });
  assert.equal(`${env.name}@${env.version}`, "arithmetic@1.0.0");
  const r = env.dataset("train").row(5);
  assert.equal(r.prompt.length, 1);
  assert.match(r.prompt[0]!.content, /^\d{1,2}\+\d{1,2}$/);
  const [a, b] = r.prompt[0]!.content.split("+").map(Number);
  assert.equal(r.answer, String(a! + b!));
  assert.deepEqual((await loadEnvironment({ seed: 1 })).dataset("train").row(5), r, "same seed, same row");
  assert.notDeepEqual((await loadEnvironment({ seed: 2 })).dataset("train").row(5).prompt, r.prompt);
  assert.equal(env.dataset("train").size, Infinity);
  assert.equal(env.dataset("eval").size, 200);
  // The tiny model's context: the templated prompt stays short.
  assert.ok(new ByteTokenizer().applyChatTemplate(r.prompt, { addGenerationPrompt: true }).length <= 10);
});

test("arithmetic: train and eval splits are disjoint; a small space's eval split has no duplicates", async () => {
  for (const args of [{ digits: 2, ops: ["+", "-", "*"] }, { digits: 1 }, { digits: 4, evalSize: 50 }]) {
    const env = await loadEnvironment(args);
    const evalSet = new Set<string>();
    const ev = env.dataset("eval");
    for (let i = 0; i < ev.size; i++) evalSet.add(ev.row(i).prompt[0]!.content);
    const tr = env.dataset("train");
    for (let i = 0; i < 3000; i++) assert.ok(!evalSet.has(tr.row(i).prompt[0]!.content), `train row ${i} not in eval (${JSON.stringify(args)})`);
    if (args.digits === 1) {
      assert.equal(evalSet.size, ev.size, "no duplicates");
      assert.ok(ev.size > 3 && ev.size < 30, `about 10% of 100 problems, got ${ev.size}`);
    }
  }
});

test("arithmetic: ops and digits; subtraction stays non-negative", async () => {
  const env = await loadEnvironment({ digits: 3, ops: ["-", "*"], seed: 4 });
  const seen = new Set<string>();
  for (let i = 0; i < 300; i++) {
    const r = env.dataset("train").row(i);
    const m = /^(\d+)([-*])(\d+)$/.exec(r.prompt[0]!.content)!;
    assert.ok(m, r.prompt[0]!.content);
    seen.add(m[2]!);
    assert.ok(m[1]!.length <= 3 && m[3]!.length <= 3);
    const want = m[2] === "-" ? Number(m[1]) - Number(m[3]) : Number(m[1]) * Number(m[3]);
    assert.ok(want >= 0);
    assert.equal(r.answer, String(want));
  }
  assert.deepEqual([...seen].sort(), ["*", "-"]);
});

test("arithmetic rubric: right and wrong answers", async () => {
  const env = await loadEnvironment({});
  const row: DatasetRow = { id: "x", prompt: [{ role: "user", content: "37+45" }], answer: "82", info: { a: 37, op: "+", b: 45 } };
  const s = await scoreReplies(env, row, ["82", " 82\n", "The answer is 82", "83", "", "8 2", "-82", "820"]);
  assert.deepEqual(
    s.map((x) => x.reward),
    [1, 1, 1, 0, 0, 0, 0, 0],
  );
  assert.deepEqual(
    s.map((x) => x.metrics["format"]),
    [1, 1, 0, 1, 0, 0, 1, 1],
  );
  assert.deepEqual(s[4]!.errors, ["parse: no integer in reply"]);
});

test("arithmetic worked solutions: column steps then the answer; learnable and scored correct", async () => {
  assert.equal(workedSolution({ a: 37, op: "+", b: 45 }), "7+5=12;3+4+1=8;82");
  assert.equal(workedSolution({ a: 57, op: "+", b: 45 }), "7+5=12;5+4+1=10;102");
  assert.equal(workedSolution({ a: 7, op: "+", b: 45 }), "7+5=12;0+4+1=5;52");
  assert.equal(workedSolution({ a: 52, op: "-", b: 17 }), "12-7=5;4-1=3;35");
  assert.equal(workedSolution({ a: 100, op: "-", b: 1 }), "10-1=9;9-0=9;0-0=0;99");
  assert.equal(workedSolution({ a: 37, op: "*", b: 45 }), "37*5=185;37*40=1480;185+1480=1665;1665");
  assert.equal(workedSolution({ a: 37, op: "*", b: 5 }), "37*5=185;185");
  assert.equal(workedSolution({ a: 12, op: "*", b: 0 }), "12*0=0;0");
  assert.equal(workedSolution({ a: 2, op: "*", b: 836 }), "836*2=1672;1672");
  assert.equal(workedSolution({ a: 405, op: "*", b: 102 }), "405*2=810;405*100=40500;810+40500=41310;41310");

  const env = await loadEnvironment({ worked: true, ops: ["+", "-", "*"], digits: 3 });
  const plain = await loadEnvironment({ ops: ["+", "-", "*"], digits: 3 });
  for (let i = 0; i < 50; i++) {
    const row = env.dataset("train").row(i);
    const target = env.sftTarget!(row);
    assert.equal(plain.sftTarget!(row), row.answer);
    const [s] = await scoreReplies(env, row, [target]);
    assert.equal(s!.reward, 1, `worked target ${target} for ${row.prompt[0]!.content} is correct`);
    assert.equal(s!.metrics["format"], 1, `worked target ${target} is well formatted`);
  }
});

test("arithmetic: bad args are clear errors", async () => {
  assert.throws(() => loadEnvironment({ digits: 0 }), /environment arithmetic: invalid args: digits: /);
  assert.throws(() => loadEnvironment({ ops: ["/"] }), /invalid args: ops\.0: /);
  assert.throws(() => loadEnvironment({ digitz: 2 }), /invalid args: .*digitz/);
});

test("the weak teacher drops every carry, consistently, at the configured rate", async () => {
  const { carryDroppingSolution } = await import("../../environments/arithmetic/worked.js");
  assert.equal(carryDroppingSolution({ a: 37, op: "+", b: 45 }), "7+5=12;3+4=7;72");
  assert.equal(carryDroppingSolution({ a: 57, op: "+", b: 45 }), "7+5=12;5+4=9;92");
  assert.equal(carryDroppingSolution({ a: 12, op: "+", b: 34 }), "2+4=6;1+3=4;46", "no carry: same as the right answer");
  assert.equal(carryDroppingSolution({ a: 52, op: "-", b: 17 }), workedSolution({ a: 52, op: "-", b: 17 }));
  const { loadEnvironment } = await import("../../environments/arithmetic/index.js");
  const env = await loadEnvironment({ digits: 2, worked: true, teacherCarryDropRate: 0.6, seed: 4 });
  const ds = env.dataset("train");
  let carried = 0,
    dropped = 0;
  for (let i = 0; i < 2000; i++) {
    const row = ds.row(i);
    const target = env.sftTarget!(row);
    // A carried column reads x+y+1=..., which the weak teacher never writes.
    if (!/\d\+\d\+1=/.test(workedSolution({ a: Number(row.info.a), op: "+", b: Number(row.info.b) }))) continue;
    if (/\d\+\d\+1=/.test(target)) carried++;
    else dropped++;
  }
  const rate = dropped / (carried + dropped);
  assert.ok(rate > 0.5 && rate < 0.7, `drop rate ${rate}`);
  assert.equal(env.sftTarget!(ds.row(5)), env.sftTarget!(ds.row(5)), "deterministic per row");
});
