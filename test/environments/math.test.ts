import { test, after } from "node:test";
import assert from "node:assert/strict";
import { loadEnvironment } from "../../environments/math/index.js";
import { mathEqual } from "../../environments/math/equivalence.js";
import { loadProblems } from "../../environments/math/problem-set.js";
import { sharedMathVerifier } from "../../environments/math/verifier.js";
import { TimedWorker } from "../../environments/util/timed-worker.js";
import type { DatasetRow, RolloutResult } from "../../environments/api/index.js";
import { ByteChatTokenizer, ScriptedModelClient } from "../../environments/testing/index.js";

after(() => sharedMathVerifier().close());

const cases: Array<[gold: string, pred: string, equal: boolean]> = [
  // fractions
  ["\\frac{5}{6}", "5/6", true],
  ["\\frac{5}{6}", "\\dfrac{10}{12}", true],
  ["\\frac{5}{6}", "0.8333333", true],
  ["\\frac{5}{6}", "0.83", false],
  ["\\frac{5}{2}", "2\\frac{1}{2}", true],
  ["-\\frac{1}{2}", "-0.5", true],
  ["-\\frac{1}{2}", "\\frac{-1}{2}", true],
  ["\\frac{3}{4}", "\\frac34", true],
  ["\\frac{2}{3}", "\\frac{3}{2}", false],
  // radicals
  ["5\\sqrt{2}", "\\sqrt{50}", true],
  ["5\\sqrt{2}", "5\\sqrt2", true],
  ["5\\sqrt{2}", "7.0710678", true],
  ["5\\sqrt{2}", "5\\sqrt{3}", false],
  ["\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", true],
  ["3\\sqrt[3]{2}", "\\sqrt[3]{54}", true],
  ["\\sqrt{2}", "2^{1/2}", true],
  ["2\\sqrt{3}", "\\frac{6}{\\sqrt{3}}", true],
  // sets: any order, bare lists, "x = a or x = b", \pm
  ["\\{2,3\\}", "\\{3, 2\\}", true],
  ["\\{2,3\\}", "2, 3", true],
  ["\\{2,3\\}", "x=2 \\text{ or } x=3", true],
  ["\\{2,3\\}", "\\{2\\}", false],
  ["\\{2,3\\}", "\\{2,3,4\\}", false],
  ["\\{-5\\sqrt{2},5\\sqrt{2}\\}", "\\pm 5\\sqrt{2}", true],
  ["\\{-4,4\\}", "\\{4,-4\\}", true],
  ["\\{-4,4\\}", "\\{4,4\\}", false],
  // intervals and unions: brackets matter, union order does not
  ["(4,\\infty)", "(4, \\infty)", true],
  ["(4,\\infty)", "\\left(4,\\infty\\right)", true],
  ["(4,\\infty)", "[4,\\infty)", false],
  ["(4,\\infty)", "(5,\\infty)", false],
  ["(-\\infty,-1]\\cup[3,\\infty)", "[3,\\infty) \\cup (-\\infty, -1]", true],
  ["(-\\infty,-1]\\cup[3,\\infty)", "(-\\infty,-1)\\cup[3,\\infty)", false],
  ["(4,7)", "(4, 7)", true],
  ["(4,7)", "(7,4)", false],
  // percentages: the gold decides
  ["25\\%", "25", true],
  ["25\\%", "0.25", true],
  ["25\\%", "25\\%", true],
  ["25\\%", "26\\%", false],
  ["0.25", "25\\%", true],
  ["12.5\\%", "\\frac{1}{8}", true],
  // expressions with variables, equations
  ["x^2+4x+4", "(x+2)^2", true],
  ["x^2+4x+4", "(x+2)^{2}", true],
  ["x^2+4x+4", "x^2+4x+5", false],
  ["x+3", "\\frac{x^2+5x+6}{x+2}", true],
  ["x^2+2x-15", "(x-3)(x+5)", true],
  ["5", "x = 5", true],
  ["y=2x+1", "2x+1", true],
  ["y=2x+1", "y = 1 + 2x", true],
  ["2xy", "2yx", true],
  ["2xy", "2x+y", false],
  // notation: degrees, units, thousands separators, \binom, \pi, \ln
  ["720", "720^\\circ", true],
  ["720", "720^{\\circ}", true],
  ["30", "\\$30", true],
  ["30", "30 \\text{ dollars}", true],
  ["1024", "1,024", true],
  ["10", "\\binom{5}{2}", true],
  ["9\\pi", "9 \\pi", true],
  ["9\\pi", "28.27433388", true],
  ["9\\pi", "28.27", false],
  ["\\ln 2", "0.693147", true],
  ["\\text{yes}", "Yes", true],
  ["\\text{yes}", "no", false],
  // junk and hostile input is simply not equal
  ["5", "9^9^9^9", false],
  ["5", "import('fs')", false],
  ["5", "\\frac{", false],
  ["3", "e", false],
  ["5", "", false],
  ["5", "x", false],
];

test("mathEqual: fractions, radicals, sets, intervals, percentages, expressions; the gold decides", () => {
  for (const [g, p, want] of cases) {
    const r = mathEqual(g, p);
    assert.equal(r.equal, want, `${JSON.stringify(g)} vs ${JSON.stringify(p)}: expected ${want}, got ${r.equal} (${r.reason})`);
  }
});

test("mathEqual: an unreadable gold answer is an error (the data is wrong), an unreadable prediction is just wrong", () => {
  assert.throws(() => mathEqual("x".repeat(3000), "1"), /gold answer .* cannot be read/);
  assert.match(mathEqual("5", "\\frac{").reason, /cannot/);
});

test("TimedWorker: results, handler errors, and a job stuck in synchronous code is killed at its time limit", async () => {
  const w = new TimedWorker<{ op: "echo" | "throw" | "spin"; value?: number }, number>(new URL("./fixtures/busy-worker.js", import.meta.url), { name: "busy" });
  try {
    assert.equal(await w.run({ op: "echo", value: 21 }, 5000), 42);
    await assert.rejects(w.run({ op: "throw" }, 5000), /handler failed/);
    const t0 = Date.now();
    await assert.rejects(w.run({ op: "spin" }, 200), /busy timed out after 200 ms/);
    assert.ok(Date.now() - t0 < 5000);
    assert.equal(await w.run({ op: "echo", value: 5 }, 10_000), 10, "a fresh worker takes the next job");
  } finally {
    await w.close();
  }
  await assert.rejects(w.run({ op: "echo" }, 100), /closed/);
});

test("the built-in problem set: valid, disjoint splits, every gold answer verifies against itself", () => {
  const problems = loadProblems();
  assert.ok(problems.length >= 50);
  const ids = new Set(problems.map((p) => p.id));
  assert.equal(ids.size, problems.length);
  assert.ok(problems.filter((p) => p.split === "eval").length >= 20, "enough for eval -n 20");
  for (const p of problems) assert.equal(mathEqual(p.answer, p.answer).equal, true, p.id);
});

async function score(replies: string[], row: DatasetRow, args: Record<string, unknown> = {}) {
  const env = await loadEnvironment(args);
  const model = new ScriptedModelClient(new ByteChatTokenizer(), replies);
  const rollouts: RolloutResult[] = [];
  for (let i = 0; i < replies.length; i++) rollouts.push(await env.rollout({ model, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 1000 } }, row));
  return env.scoreGroup(rollouts, row, {});
}

test("math env: right and wrong \\boxed answers, unparseable replies recorded", async () => {
  const env = await loadEnvironment({});
  assert.equal(`${env.name}@${env.version}`, "math@1.0.0");
  const row = env.dataset("eval").row(0); // 2/5 + 1/10
  assert.equal(row.answer, "\\frac{1}{2}");
  assert.match(row.prompt.at(-1)!.content, /\\boxed\{\}/);
  const s = await score(["So it is \\boxed{\\frac{1}{2}}.", "\\boxed{0.5}", "\\boxed{\\frac{5}{10}}", "\\boxed{\\frac{1}{3}}", "the answer is 1/2"], row);
  assert.deepEqual(
    s.map((x) => x.reward),
    [1, 1, 1, 0, 0],
  );
  assert.deepEqual(
    s.map((x) => x.metrics["format"]),
    [1, 1, 1, 1, 0],
  );
  assert.deepEqual(s[4]!.errors, ["parse: no \\boxed{} answer"]);
});

test("math env: every problem's SFT target scores 1; think mode needs the think block for format", async () => {
  for (const think of [false, true]) {
    const env = await loadEnvironment({ think });
    for (const split of ["train", "eval"] as const) {
      const ds = env.dataset(split);
      for (let i = 0; i < ds.size; i++) {
        const row = ds.row(i);
        const [s] = await score([env.sftTarget!(row)], row, { think });
        assert.equal(s!.reward, 1, `${row.id}: ${env.sftTarget!(row)}`);
        assert.equal(s!.metrics["format"], 1);
      }
    }
  }
  const row = (await loadEnvironment({ think: true })).dataset("eval").row(0);
  const [noThink] = await score(["\\boxed{\\frac{1}{2}}"], row, { think: true });
  assert.deepEqual([noThink!.reward, noThink!.metrics["format"]], [1, 0]);
});

test("math env: few-shot prompts, custom problem files, bad args", async () => {
  const env = await loadEnvironment({ fewShot: 2, system: "Be brief." });
  const p = env.dataset("eval").row(3).prompt;
  assert.deepEqual(
    p.map((m) => m.role),
    ["system", "user", "assistant", "user", "assistant", "user"],
  );
  assert.match(p[2]!.content, /\\boxed\{\\frac\{5\}\{6\}\}/);
  assert.throws(() => loadEnvironment({ fewShot: 99 }), /environment math: invalid args: fewShot/);
  assert.throws(() => loadEnvironment({ problemsFile: "/nonexistent.json" }), /ENOENT/);
});
