// Held-out splits measure what training taught only when they follow the train distribution: every built-in
// environment's eval split is compared with its train rows, class by class (a chi-square test and a tolerance
// on each class's share), with fixed seeds; each comparison has a positive control, the split as it was
// before (enumerated or drawn without regard to train's mix), which the same test must reject. A split that is
// different on purpose (arithmetic's "hard") carries its own name, and the test tells it apart too.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createEnvironment, generatorDataset, heldOutSplits, Rubric, type DatasetRow, type Environment } from "../../environments/api/index.js";
import { loadEnvironment as loadArithmetic } from "../../environments/arithmetic/index.js";
import { classOf, hasCarry, inEvalSplit, isHard, type ArithmeticProblem, type ProblemSpace } from "../../environments/arithmetic/problem.js";
import { loadEnvironment as loadLogic } from "../../environments/logic/index.js";
import { LEVELS, puzzleFor, puzzleStratum, type CountdownPuzzle } from "../../environments/logic/countdown.js";
import { loadEnvironment as loadTool } from "../../environments/tool/index.js";
import { loadEnvironment as loadCode } from "../../environments/code/index.js";
import builtinCode from "../../environments/code/problems.json" with { type: "json" };
import { loadProblems, splitProblems } from "../../environments/math/problem-set.js";
import { rngFor } from "../../environments/util/rng.js";

type Counts = Map<string, number>;

function countBy<T>(items: readonly T[], key: (t: T) => string): Counts {
  const c: Counts = new Map();
  for (const t of items) c.set(key(t), (c.get(key(t)) ?? 0) + 1);
  return c;
}

/** Upper 0.1% point of chi-square with df degrees of freedom (Wilson–Hilferty; close enough from df 1). */
function chiSquareCritical(df: number): number {
  const z = 3.0902;
  const a = 2 / (9 * df);
  return df * (1 - a + z * Math.sqrt(a)) ** 3;
}

/**
 * Whether eval rows are distributed like train rows over the classes: the 2×K chi-square statistic of
 * homogeneity (classes with fewer than 5 rows in all are pooled) below its 0.1% point, and no class's share
 * further than `tolerance` apart. Returns what failed, or null.
 */
function distributionGap(train: Counts, evalRows: Counts, tolerance: number): string | null {
  const nT = [...train.values()].reduce((s, x) => s + x, 0);
  const nE = [...evalRows.values()].reduce((s, x) => s + x, 0);
  const classes = [...new Set([...train.keys(), ...evalRows.keys()])].sort();
  const cells: Array<[number, number]> = [];
  let pooled: [number, number] = [0, 0];
  for (const k of classes) {
    const t = train.get(k) ?? 0,
      e = evalRows.get(k) ?? 0;
    if (t + e < 5) pooled = [pooled[0] + t, pooled[1] + e];
    else cells.push([t, e]);
  }
  if (pooled[0] + pooled[1] > 0) cells.push(pooled);
  let chi = 0;
  for (const [t, e] of cells) {
    const total = t + e;
    const et = (total * nT) / (nT + nE),
      ee = (total * nE) / (nT + nE);
    chi += (t - et) ** 2 / et + (e - ee) ** 2 / ee;
  }
  const df = cells.length - 1;
  const problems: string[] = [];
  if (df > 0 && chi > chiSquareCritical(df)) problems.push(`chi-square ${chi.toFixed(1)} > ${chiSquareCritical(df).toFixed(1)} (df ${df})`);
  for (const k of classes) {
    const gap = Math.abs((train.get(k) ?? 0) / nT - (evalRows.get(k) ?? 0) / nE);
    if (gap > tolerance)
      problems.push(
        `class ${k}: share ${(((evalRows.get(k) ?? 0) / nE) * 100).toFixed(1)}% in eval, ${(((train.get(k) ?? 0) / nT) * 100).toFixed(1)}% in train`,
      );
  }
  return problems.length ? problems.join("; ") : null;
}

const problemOf = (r: DatasetRow): ArithmeticProblem => ({ a: Number(r.info["a"]), op: r.info["op"] as ArithmeticProblem["op"], b: Number(r.info["b"]) });
const arithmeticClass = (p: ArithmeticProblem) => `${classOf(p)}${hasCarry(p) ? "+carry" : ""}`;
const rows = (env: Environment, split: string, n?: number) => {
  const ds = env.dataset(split);
  return Array.from({ length: n ?? ds.size }, (_, i) => ds.row(i));
};

/** The eval split as it was: every eval-partition problem of a small space, uniformly shuffled (81% two 2-digit operands for digits 2). */
function enumeratedUniformly(space: ProblemSpace, size: number): ArithmeticProblem[] {
  const all: ArithmeticProblem[] = [];
  const n = 10 ** space.digits;
  for (const op of new Set(space.ops))
    for (let a = 0; a < n; a++) for (let b = 0; b < (op === "-" ? a + 1 : n); b++) if (inEvalSplit(space, { a, op, b })) all.push({ a, op, b });
  return rngFor(space.seed, "eval-order").shuffle(all).slice(0, size);
}

const ARITHMETIC_SPACES = [
  { digits: 2, ops: ["+"] as const, seed: 1 }, // the demo's
  { digits: 2, ops: ["+", "-", "*"] as const, seed: 0 },
  { digits: 3, ops: ["+", "-"] as const, seed: 2 },
];

test("arithmetic: the eval split follows train (classes by op, digit counts and carry), its every prefix too; the old split does not", async () => {
  for (const space of ARITHMETIC_SPACES) {
    const env = await loadArithmetic({ ...space, ops: [...space.ops] });
    const train = countBy(rows(env, "train", 8000).map(problemOf), arithmeticClass);
    const evalRows = rows(env, "eval").map(problemOf);
    assert.equal(evalRows.length, 200);
    const gap = distributionGap(train, countBy(evalRows, arithmeticClass), 0.03);
    assert.equal(gap, null, `eval split of ${JSON.stringify(space)}: ${gap}`);
    // The evaluator reads a prefix (eval.n split across environments): the first 60 rows are as honest.
    const prefixGap = distributionGap(countBy(rows(env, "train", 8000).map(problemOf), classOf), countBy(evalRows.slice(0, 60), classOf), 0.05);
    assert.equal(prefixGap, null, `first 60 eval rows of ${JSON.stringify(space)}: ${prefixGap}`);
    // Positive control: the same test rejects the split as it was built before.
    if (space.digits === 2) {
      const old = enumeratedUniformly({ ...space, ops: [...space.ops] }, 200);
      assert.notEqual(distributionGap(train, countBy(old, arithmeticClass), 0.03), null, `the old split of ${JSON.stringify(space)} passed`);
    }
  }
});

test("arithmetic: eval and hard are disjoint from train; every small class has eval problems, with and without a carry", async () => {
  for (const space of [...ARITHMETIC_SPACES, { digits: 1, ops: ["+"] as const, seed: 1 }]) {
    const env = await loadArithmetic({ ...space, ops: [...space.ops] });
    const heldOut = new Set(heldOutSplits(env).flatMap((s) => rows(env, s).map((r) => r.prompt[0]!.content)));
    for (const r of rows(env, "train", 5000)) assert.ok(!heldOut.has(r.prompt[0]!.content), `train row ${r.id} (${r.prompt[0]!.content}) is held out`);
  }
  // Seed 1 hashes none of the 45 one-digit sums with a carry into eval; the partition still holds some out.
  const env = await loadArithmetic({ digits: 1, seed: 1 });
  const evalRows = rows(env, "eval").map(problemOf);
  assert.ok(evalRows.some(hasCarry) && evalRows.some((p) => !hasCarry(p)), evalRows.map((p) => `${p.a}+${p.b}`).join(" "));
  assert.equal(new Set(evalRows.map((p) => `${p.a}+${p.b}`)).size, evalRows.length, "a small space's eval split repeats nothing");
});

test("arithmetic: the hard split is named apart (multi-digit, with a carry), differs from train, and only where it exists", async () => {
  const env = await loadArithmetic({ digits: 2, ops: ["+", "-", "*"] });
  assert.deepEqual(heldOutSplits(env), ["eval", "hard"]);
  const hard = rows(env, "hard").map(problemOf);
  assert.equal(hard.length, 200);
  assert.ok(hard.every(isHard), "every hard problem has two multi-digit operands and a carry");
  assert.equal(new Set(hard.map((p) => `${p.a}${p.op}${p.b}`)).size, hard.length, "no repeats");
  assert.deepEqual([...new Set(hard.map((p) => p.op))].sort(), ["*", "+", "-"]);
  assert.ok(env.dataset("hard").row(0).id.startsWith("hard-"));
  const train = countBy(rows(env, "train", 8000).map(problemOf), arithmeticClass);
  assert.notEqual(distributionGap(train, countBy(hard, arithmeticClass), 0.03), null, "hard is not distributed like train");

  const oneDigit = await loadArithmetic({ digits: 1 });
  assert.deepEqual(heldOutSplits(oneDigit), ["eval"], "one-digit operands have no hard split");
  assert.throws(() => oneDigit.dataset("hard"), /environment arithmetic@[\d.]+: unknown split "hard" \(train, eval\)/);
});

test("logic: the eval split keeps train's mix of target sizes and operations at every level; drawn unstratified, level 1's does not", async () => {
  const stratum = (r: DatasetRow) => puzzleStratum(r.info as unknown as CountdownPuzzle);
  for (const difficulty of [1, 2, 3] as const) {
    for (const seed of [0, 1]) {
      const env = await loadLogic({ difficulty, seed });
      const train = countBy(rows(env, "train", 4000), stratum);
      const gap = distributionGap(train, countBy(rows(env, "eval"), stratum), 0.04);
      assert.equal(gap, null, `logic difficulty ${difficulty} seed ${seed}: ${gap}`);
    }
  }
  // Positive control: the eval rows as they were, the first draws of the eval partition.
  const env = await loadLogic({ difficulty: 1, seed: 1 });
  const old = Array.from({ length: 200 }, (_, i) => puzzleFor(1, "eval", i, LEVELS[1]));
  assert.notEqual(distributionGap(countBy(rows(env, "train", 4000), stratum), countBy(old, puzzleStratum), 0.04), null);
});

test("tool: question kinds are mixed alike in train and eval", async () => {
  const env = await loadTool({});
  const kind = (r: DatasetRow) => {
    const q = r.prompt.at(-1)!.content;
    return /combined/.test(q) ? "sum" : /more people/.test(q) ? "difference" : "multiple";
  };
  const gap = distributionGap(countBy(rows(env, "train", 4000), kind), countBy(rows(env, "eval"), kind), 0.06);
  assert.equal(gap, null, `tool: ${gap}`);
});

test("math and code: the shipped eval problems are as hard as the train ones (topics; reference solution length)", async () => {
  const math = splitProblems(loadProblems());
  const topic = (p: { topic?: string }) => p.topic ?? "";
  assert.equal(distributionGap(countBy(math.train, topic), countBy(math.eval, topic), 0.05), null);

  // Code problems have no topic: the length of the reference solution stands in for difficulty.
  const tier = (lines: number) => (lines <= 3 ? "short" : lines <= 6 ? "medium" : "long");
  const code = await loadCode({});
  const solutionLines = (r: DatasetRow) => code.sftTarget!(r).split("\n").length - 2; // less the fence
  const meanLines = (rs: DatasetRow[]) => rs.reduce((s, r) => s + solutionLines(r), 0) / rs.length;
  const [train, evalRows] = [rows(code, "train"), rows(code, "eval")];
  assert.ok(Math.abs(meanLines(train) - meanLines(evalRows)) <= 1, `mean solution lines: train ${meanLines(train)}, eval ${meanLines(evalRows)}`);
  const tierGap = (t: DatasetRow[], e: DatasetRow[]) =>
    Math.max(
      ...["short", "medium", "long"].map((k) =>
        Math.abs(t.filter((r) => tier(solutionLines(r)) === k).length / t.length - e.filter((r) => tier(solutionLines(r)) === k).length / e.length),
      ),
    );
  assert.ok(tierGap(train, evalRows) <= 0.15, `solution-length tiers differ by ${tierGap(train, evalRows)}`);
  // Positive control: the split as it shipped before (the six longest-to-write problems held out, mostly).
  const oldEval = new Set(["is_prime", "second_largest", "char_frequency", "merge_sorted", "run_length_encode", "title_case"]);
  const all = [...train, ...evalRows];
  const [oldTrain, oldEvalRows] = [all.filter((r) => !oldEval.has(r.id)), all.filter((r) => oldEval.has(r.id))];
  assert.ok(Math.abs(meanLines(oldTrain) - meanLines(oldEvalRows)) > 1 || tierGap(oldTrain, oldEvalRows) > 0.15, "the old code split passed");
  assert.equal(builtinCode.problems.filter((p) => p.split === "eval").length, evalRows.length);
});

test("createEnvironment: extra held-out splits are listed after eval, validated by name, and an unknown split names the known ones", () => {
  const base = {
    name: "letters",
    version: "0.1.0",
    dataset: () => generatorDataset(2, (i) => ({ id: `r-${i}`, prompt: [{ role: "user" as const, content: "x" }], answer: "1", info: {} })),
    rubric: new Rubric(),
  };
  const env = createEnvironment({ ...base, extraSplits: { long: base.dataset } });
  assert.deepEqual(heldOutSplits(env), ["eval", "long"]);
  assert.equal(env.dataset("long").size, 2);
  assert.throws(() => env.dataset("short"), /environment letters@0\.1\.0: unknown split "short" \(train, eval, long\)/);
  assert.deepEqual(heldOutSplits(createEnvironment(base)), ["eval"]);
  assert.deepEqual(heldOutSplits({}), ["eval"], "a hand-built environment without the field has eval alone");
  for (const bad of ["train", "eval", "Hard", "a b"]) {
    assert.throws(() => createEnvironment({ ...base, extraSplits: { [bad]: base.dataset } }), /names an extra split/);
  }
});
