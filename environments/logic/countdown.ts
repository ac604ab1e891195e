import { isEvalTask, rngFor, type Rng } from "../public.js";
import { parseRationalExpr, rat, ratEquals } from "../public.js";

/** Countdown: combine the given numbers with + - * / (each used exactly once) to reach the target. */
export interface CountdownPuzzle {
  numbers: number[];
  target: number;
  /** One solution, for SFT targets. */
  solution: string;
}

export interface Level {
  count: number;
  pick(rng: Rng): number[];
  targetMin: number;
  targetMax: number;
}

const smalls = (rng: Rng, n: number, hi: number) => Array.from({ length: n }, () => rng.int(1, hi));

/** 1: three numbers up to 10; 2: four up to 25; 3: the TV show's large and small numbers, three-digit targets. */
export const LEVELS: Record<1 | 2 | 3, Level> = {
  1: { count: 3, pick: (rng) => smalls(rng, 3, 10), targetMin: 2, targetMax: 100 },
  2: { count: 4, pick: (rng) => smalls(rng, 4, 25), targetMin: 10, targetMax: 300 },
  3: { count: 5, pick: (rng) => [rng.pick([25, 50, 75, 100]), rng.pick([25, 50, 75, 100]), ...smalls(rng, 3, 10)], targetMin: 100, targetMax: 999 },
};

interface Item {
  value: number;
  expr: string;
  atomic: boolean;
}

/**
 * A random solvable puzzle: combine the numbers in random order with random operators, keeping every
 * intermediate a positive integer (the game's rule), and use the result as the target.
 */
export function generatePuzzle(rng: Rng, level: Level): CountdownPuzzle | null {
  const numbers = level.pick(rng);
  const pool: Item[] = numbers.map((n) => ({ value: n, expr: String(n), atomic: true }));
  while (pool.length > 1) {
    rng.shuffle(pool);
    const a = pool.pop()!;
    const b = pool.pop()!;
    const [hi, lo] = a.value >= b.value ? [a, b] : [b, a];
    const options: Array<[string, number]> = [
      ["+", hi.value + lo.value],
      ["*", hi.value * lo.value],
    ];
    if (hi.value > lo.value) options.push(["-", hi.value - lo.value]);
    if (lo.value > 1 && hi.value % lo.value === 0) options.push(["/", hi.value / lo.value]);
    const [op, value] = rng.pick(options);
    const wrap = (x: Item) => (x.atomic ? x.expr : `(${x.expr})`);
    pool.push({ value, expr: `${wrap(hi)}${op}${wrap(lo)}`, atomic: false });
  }
  const target = pool[0]!.value;
  if (target < level.targetMin || target > level.targetMax || numbers.includes(target)) return null;
  return { numbers, target, solution: pool[0]!.expr };
}

export function puzzleKey(p: { numbers: number[]; target: number }): string {
  return `${[...p.numbers].sort((x, y) => x - y).join(",")}=${p.target}`;
}

/**
 * What makes one puzzle harder than another, as classes whose train shares the eval split keeps: the target's
 * size (roughly log-spaced buckets) and whether the generated solution multiplies or divides. (Finer classes,
 * e.g. the exact operators, are not all present on both sides of level 1's small puzzle space.)
 */
export function puzzleStratum(p: CountdownPuzzle): string {
  const bucket = [10, 20, 30, 50, 100, 200, 300, 500].filter((edge) => p.target >= edge).length;
  return `${bucket}|${solutionKind(p)}`;
}

/** "div" when the generated solution divides, else "mul" when it multiplies, else "add". */
export function solutionKind(p: Pick<CountdownPuzzle, "solution">): "add" | "mul" | "div" {
  return p.solution.includes("/") ? "div" : p.solution.includes("*") ? "mul" : "add";
}

export function puzzleFor(seed: number, split: "train" | "eval", index: number, level: Level): CountdownPuzzle {
  const rng = rngFor(seed, split, index);
  for (let attempt = 0; attempt < 100_000; attempt++) {
    const p = generatePuzzle(rng, level);
    if (p && isEvalTask(seed, puzzleKey(p)) === (split === "eval")) return p;
  }
  throw new Error(`countdown: could not generate a ${split} puzzle for index ${index}`);
}

export interface Verdict {
  correct: boolean;
  /** The expression uses exactly the given numbers (each once) and only + - * /. */
  validNumbers: boolean;
  reason: string;
}

/** Judges an answer expression; "expr = target" is accepted (the part before "=" is judged). */
export function verifyCountdown(answer: string, numbers: readonly number[], target: number): Verdict {
  const expr = answer.split("=")[0]!.trim();
  let parsed;
  try {
    parsed = parseRationalExpr(expr);
  } catch (err) {
    return { correct: false, validNumbers: false, reason: `invalid expression: ${(err as Error).message}` };
  }
  const bad = [...parsed.ops].filter((o) => !"+-*/".includes(o));
  if (bad.length) return { correct: false, validNumbers: false, reason: `operator ${bad.join(" ")} is not allowed` };
  const used = parsed.numbers.map(Number).sort((a, b) => a - b);
  const given = [...numbers].sort((a, b) => a - b);
  const validNumbers = used.length === given.length && used.every((x, k) => x === given[k]);
  if (!validNumbers) return { correct: false, validNumbers, reason: `uses ${used.join(", ")} instead of each of ${given.join(", ")} once` };
  const correct = ratEquals(parsed.value, rat(BigInt(target)));
  return { correct, validNumbers, reason: correct ? "reaches the target" : "does not reach the target" };
}
