import { test } from "node:test";
import assert from "node:assert/strict";
import { loadEnvironment } from "../../environments/logic/index.js";
import { verifyCountdown } from "../../environments/logic/countdown.js";
import { formatRational, parseRationalExpr } from "../../environments/util/rational-expr.js";
import type { DatasetRow, RolloutResult } from "../../environments/api/index.js";
import { ByteChatTokenizer, ScriptedModelClient } from "../../environments/testing/index.js";

test("exact rational expressions: precedence, division, powers, bad input", () => {
  const v = (e: string) => formatRational(parseRationalExpr(e).value);
  assert.equal(v("2+3*4"), "14");
  assert.equal(v("(2+3)*4"), "20");
  assert.equal(v("1/3*3"), "1");
  assert.equal(v("1/3"), "0.3333333333");
  assert.equal(v("-2^2"), "-4");
  assert.equal(v("2^-2"), "0.25");
  assert.equal(v("2**10"), "1024");
  assert.equal(v("0.1+0.2"), "0.3");
  assert.equal(v("7 \u00d7 6 \u2212 2"), "40");
  assert.deepEqual(parseRationalExpr("(25+5)*3-1").numbers, ["25", "5", "3", "1"]);
  assert.throws(() => parseRationalExpr("1/0"), /division by zero/);
  assert.throws(() => parseRationalExpr("2^1000"), /power too large/);
  assert.throws(() => parseRationalExpr("9^64^64"), /power too large|number too large/);
  assert.throws(() => parseRationalExpr("2+"), /unexpected end/);
  assert.throws(() => parseRationalExpr("2+x"), /unexpected "x"/);
  assert.throws(() => parseRationalExpr("((((1))"), /expected \)/);
  assert.throws(() => parseRationalExpr("(".repeat(100) + "1" + ")".repeat(100)), /nested too deeply/);
});

test("countdown verifier: known right and wrong answers", () => {
  const nums = [3, 7, 25];
  assert.equal(verifyCountdown("(25-7)*3", nums, 54).correct, true);
  assert.equal(verifyCountdown("3*(25-7) = 54", nums, 54).correct, true);
  assert.equal(verifyCountdown("(25-7)*3", nums, 55).correct, false);
  const reuse = verifyCountdown("25+25+3+1", nums, 54);
  assert.deepEqual([reuse.correct, reuse.validNumbers], [false, false]);
  assert.match(reuse.reason, /instead of each of 3, 7, 25 once/);
  assert.equal(verifyCountdown("25+7", nums, 32).correct, false, "each number must be used");
  assert.equal(verifyCountdown("3^2+25+7", nums, 41).correct, false, "no powers");
  assert.match(verifyCountdown("25/(7-7)*3", nums, 0).reason, /invalid expression|instead of/);
  assert.equal(verifyCountdown("(7-3)/(25)", nums, 0).correct, false);
  assert.equal(verifyCountdown("25*3/7", [3, 7, 25], 11).correct, false, "75/7 is not 11 (exact arithmetic)");
});

test("logic env: generated puzzles are solvable, deterministic, disjoint by split, and scale with difficulty", async () => {
  for (const difficulty of [1, 2, 3]) {
    const env = await loadEnvironment({ difficulty, seed: 5, evalSize: 30 });
    const evalKeys = new Set<string>();
    for (let i = 0; i < 30; i++) {
      const r = env.dataset("eval").row(i);
      evalKeys.add(r.prompt[0]!.content);
      const info = r.info as { numbers: number[]; target: number; solution: string };
      assert.equal(info.numbers.length, difficulty + 2);
      assert.ok(verifyCountdown(info.solution, info.numbers, info.target).correct, `${info.solution} solves ${r.prompt[0]!.content}`);
    }
    for (let i = 0; i < 200; i++) {
      const r = env.dataset("train").row(i);
      assert.ok(!evalKeys.has(r.prompt[0]!.content));
      if (difficulty === 3) assert.ok(Number(r.answer) >= 100 && Number(r.answer) <= 999);
    }
    assert.deepEqual((await loadEnvironment({ difficulty, seed: 5 })).dataset("train").row(7), env.dataset("train").row(7));
  }
  assert.throws(() => loadEnvironment({ difficulty: 4 }), /environment logic: invalid args: difficulty/);
});

test("logic env rubric: right, wrong, misused numbers, unparseable", async () => {
  const env = await loadEnvironment({});
  const row: DatasetRow = {
    id: "x",
    prompt: [{ role: "user", content: "Using the numbers 3, 7, 25, make 54." }],
    answer: "54",
    info: { numbers: [3, 7, 25], target: 54 },
  };
  const replies = ["<answer>(25-7)*3</answer>", "<answer>25+7*3</answer>", "<answer>25+25+3+1</answer>", "(25-7)*3", "<answer>(25-7)*3"];
  const model = new ScriptedModelClient(new ByteChatTokenizer(), replies);
  const rollouts: RolloutResult[] = [];
  for (let i = 0; i < replies.length; i++) rollouts.push(await env.rollout({ model, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 100 } }, row));
  const s = await env.scoreGroup(rollouts, row, {});
  assert.deepEqual(
    s.map((x) => x.reward),
    [1, 0, 0, 0, 1],
  );
  assert.deepEqual(
    s.map((x) => x.metrics["valid_numbers"]),
    [1, 1, 0, 0, 1],
  );
  assert.deepEqual(
    s.map((x) => x.metrics["format"]),
    [1, 1, 1, 0, 0],
  );
  assert.deepEqual(s[3]!.errors, ["parse: no <answer> field"]);
  const gen = env.dataset("train").row(0);
  assert.match(env.sftTarget!(gen), /^<answer>.+<\/answer>$/);
});
