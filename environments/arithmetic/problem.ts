import { isEvalTask, rngFor, type Rng } from "../util/rng.js";

export type ArithmeticOp = "+" | "-" | "*";

export interface ArithmeticProblem {
  a: number;
  op: ArithmeticOp;
  b: number;
}

export interface ProblemSpace {
  digits: number;
  ops: readonly ArithmeticOp[];
  seed: number;
}

export function solve(p: ArithmeticProblem): number {
  return p.op === "+" ? p.a + p.b : p.op === "-" ? p.a - p.b : p.a * p.b;
}

export function problemText(p: ArithmeticProblem): string {
  return `${p.a}${p.op}${p.b}`;
}

/**
 * An operand with 1..digits digits: the digit count is uniform first, so short problems are as common as
 * long ones (a natural curriculum: a model learns 1-digit sums before carries across 3 digits).
 */
function operand(rng: Rng, digits: number): number {
  const d = rng.int(1, digits);
  return rng.int(d === 1 ? 0 : 10 ** (d - 1), 10 ** d - 1);
}

/** Subtraction keeps a >= b so answers stay non-negative (one less thing for a tiny model to learn). */
function ordered(a: number, op: ArithmeticOp, b: number): ArithmeticProblem {
  return op === "-" && a < b ? { a: b, op, b: a } : { a, op, b };
}

export function sampleProblem(rng: Rng, space: ProblemSpace): ArithmeticProblem {
  const op = rng.pick(space.ops);
  return ordered(operand(rng, space.digits), op, operand(rng, space.digits));
}

export function inEvalSplit(space: ProblemSpace, p: ArithmeticProblem): boolean {
  return isEvalTask(space.seed, problemText(p));
}

/** Train row i: the first draw from (seed, "train", i) that is not an eval problem. */
export function trainProblem(space: ProblemSpace, index: number): ArithmeticProblem {
  const rng = rngFor(space.seed, "train", index);
  for (let attempt = 0; attempt < 10_000; attempt++) {
    const p = sampleProblem(rng, space);
    if (!inEvalSplit(space, p)) return p;
  }
  throw new Error(`arithmetic: cannot draw a train problem (digits=${space.digits}, ops=${space.ops.join("")})`);
}

/** Spaces up to this many problems are enumerated so that a small eval set has no duplicates. */
const ENUMERATE_LIMIT = 200_000;

export function spaceSize(space: ProblemSpace): number {
  const n = 10 ** space.digits;
  return space.ops.reduce((s, op) => s + (op === "-" ? (n * (n + 1)) / 2 : n * n), 0);
}

/**
 * The eval split: in small spaces, a seeded shuffle of every eval-partition problem (no duplicates, size
 * capped by how many exist); in large ones, seeded draws from the eval partition (duplicates negligible).
 */
export function makeEvalSplit(space: ProblemSpace, evalSize: number): { size: number; problem(index: number): ArithmeticProblem } {
  if (spaceSize(space) <= ENUMERATE_LIMIT) {
    const all: ArithmeticProblem[] = [];
    const n = 10 ** space.digits;
    for (const op of new Set(space.ops)) {
      for (let a = 0; a < n; a++) {
        for (let b = 0; b < (op === "-" ? a + 1 : n); b++) {
          const p = { a, op, b };
          if (inEvalSplit(space, p)) all.push(p);
        }
      }
    }
    rngFor(space.seed, "eval-order").shuffle(all);
    const chosen = all.slice(0, evalSize);
    if (chosen.length === 0) throw new Error(`arithmetic: the eval split is empty for digits=${space.digits}`);
    return { size: chosen.length, problem: (i) => chosen[i]! };
  }
  return {
    size: evalSize,
    problem(index: number): ArithmeticProblem {
      const rng = rngFor(space.seed, "eval", index);
      for (;;) {
        const p = sampleProblem(rng, space);
        if (inEvalSplit(space, p)) return p;
      }
    },
  };
}
