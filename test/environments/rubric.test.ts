import { test } from "node:test";
import assert from "node:assert/strict";
import { Rubric, XMLParser, type DatasetRow, type RolloutResult } from "../../environments/api/index.js";

const row: DatasetRow = { id: "r0", prompt: [{ role: "user", content: "q" }], answer: "7", info: {} };

function rollout(reply: string, state: Record<string, unknown> = {}): RolloutResult {
  return {
    promptIds: [1],
    completionIds: [2],
    completionMask: [1],
    samplerLogprobs: [-0.1],
    messages: [...row.prompt, { role: "assistant", content: reply }],
    numTurns: 1,
    turnOffsets: [0],
    stopReason: "eos",
    isTruncated: false,
    policyVersionMin: 0,
    policyVersionMax: 0,
    state,
    timings: { generateMs: 0, envMs: 0 },
  };
}

test("weighted sum of components; metrics reported but not rewarded; async and boolean values", async () => {
  const parser = new XMLParser(["answer"]);
  const rubric = new Rubric({ parser })
    .reward("correct", ({ parsed, answer }) => parsed?.answer === answer, 1.0)
    .reward("format", async ({ completion }) => parser.formatReward(completion), 0.25)
    .metric("length", ({ completion }) => completion[0]!.content.length);
  const [right, wrong] = await rubric.scoreGroup([rollout("<answer>7</answer>"), rollout("<answer>8</answer> x")], row, {});
  assert.deepEqual(right, { reward: 1.25, components: { correct: 1, format: 1 }, metrics: { length: 18 }, errors: [] });
  assert.equal(wrong!.reward, 0);
  assert.deepEqual(wrong!.components, { correct: 0, format: 0 });
});

test("a throwing, hanging or non-finite function scores 0 and is recorded; others still count", async () => {
  const rubric = new Rubric({ timeoutMs: 50 })
    .reward("ok", () => 1, 2)
    .reward(
      "throws",
      () => {
        throw new Error("boom");
      },
      1,
    )
    .reward("hangs", () => new Promise<number>(() => undefined), 1)
    .reward("nan", () => Number.NaN, 1);
  const t0 = Date.now();
  const s = await rubric.score(rollout("x"), row);
  assert.ok(Date.now() - t0 < 2000, "the hanging function is abandoned at its time limit");
  assert.equal(s.reward, 2);
  assert.deepEqual(s.components, { ok: 1, throws: 0, hangs: 0, nan: 0 });
  assert.equal(s.errors.length, 3);
  assert.match(s.errors.find((e) => e.startsWith("throws"))!, /throws: boom/);
  assert.match(s.errors.find((e) => e.startsWith("hangs"))!, /timed out after 50 ms/);
  assert.match(s.errors.find((e) => e.startsWith("nan"))!, /NaN/);
});

test("the time limit's signal reaches the function", async () => {
  let aborted = false;
  const rubric = new Rubric({ timeoutMs: 30 }).reward(
    "slow",
    ({ signal }) =>
      new Promise<number>((resolve) => {
        signal.addEventListener("abort", () => {
          aborted = true;
          resolve(1);
        });
      }),
  );
  const s = await rubric.score(rollout("x"), row);
  assert.equal(aborted, true);
  assert.equal(s.components["slow"], 0);
});

test("group functions see all rollouts; a wrong-length result is an error for every rollout", async () => {
  const rubric = new Rubric()
    .groupReward("rank", (inputs) => inputs.map((inp) => (inp.completion[0]!.content === "best" ? 1 : 0)), 0.5)
    .groupMetric("bad", () => [1]);
  const s = await rubric.scoreGroup([rollout("best"), rollout("meh"), rollout("best")], row);
  assert.deepEqual(
    s.map((x) => x.reward),
    [0.5, 0, 0.5],
  );
  for (const x of s) {
    assert.equal(x.metrics["bad"], 0);
    assert.match(x.errors[0]!, /bad: group function returned 1 values for 3 rollouts/);
  }
});

test("unparseable output is recorded with its reason; rollout metrics and errors join the score", async () => {
  const rubric = new Rubric({ parser: new XMLParser(["answer"]) }).reward("correct", ({ parsed, answer }) => parsed?.answer === answer);
  const s = await rubric.score(rollout("I think 7", { metrics: { tool_calls: 3, junk: "x" }, errors: ["envResponse: oops"] }), row);
  assert.equal(s.reward, 0);
  assert.deepEqual(s.metrics, { tool_calls: 3 });
  assert.deepEqual(s.errors, ["parse: no <answer> field", "rollout: envResponse: oops"]);
});

test("memo runs shared work once per rollout", async () => {
  let runs = 0;
  const tests = (inp: { memo: <T>(k: string, f: () => Promise<T>) => Promise<T> }) =>
    inp.memo("tests", async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 5));
      return { passed: 2, total: 4 };
    });
  const rubric = new Rubric()
    .reward("all_pass", async (inp) => {
      const r = await tests(inp);
      return r.passed === r.total;
    })
    .metric("pass_rate", async (inp) => {
      const r = await tests(inp);
      return r.passed / r.total;
    });
  const s = await rubric.scoreGroup([rollout("a"), rollout("b")], row);
  assert.equal(runs, 2, "once per rollout, not once per function");
  assert.deepEqual(s[0], { reward: 0, components: { all_pass: 0 }, metrics: { pass_rate: 0.5 }, errors: [] });
});

test("bad rubric definitions are rejected", () => {
  assert.throws(() => new Rubric().reward("a", () => 1).metric("a", () => 1), /duplicate reward function name "a"/);
  assert.throws(() => new Rubric().reward("a", () => 1, Number.NaN), /weight of "a" must be finite/);
  assert.throws(() => new Rubric({ timeoutMs: 0 }), /timeoutMs must be > 0/);
});
