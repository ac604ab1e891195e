import { hashOf, isEvalTask, rngFor, type Rng } from "../public.js";
import { apportion, interleave } from "../public.js";

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

export function digitsOf(n: number): number {
  return String(n).length;
}

/** An operand with exactly d digits (0..9 for one digit). */
function operandWithDigits(rng: Rng, d: number): number {
  return rng.int(d === 1 ? 0 : 10 ** (d - 1), 10 ** d - 1);
}

/**
 * An operand with 1..digits digits: the digit count is uniform first, so short problems are as common as
 * long ones (a natural curriculum: a model learns 1-digit sums before carries across 3 digits).
 */
function operand(rng: Rng, digits: number): number {
  return operandWithDigits(rng, rng.int(1, digits));
}

/** Subtraction keeps a >= b so answers stay non-negative (one less thing for a tiny model to learn). */
function ordered(a: number, op: ArithmeticOp, b: number): ArithmeticProblem {
  return op === "-" && a < b ? { a: b, op, b: a } : { a, op, b };
}

/** The train distribution: what every train row is drawn from (less the eval partition). */
export function sampleProblem(rng: Rng, space: ProblemSpace): ArithmeticProblem {
  const op = rng.pick(space.ops);
  return ordered(operand(rng, space.digits), op, operand(rng, space.digits));
}

/** Share of the problem space held out for evaluation. */
const EVAL_FRACTION = 0.1;
/** Strata up to this many problems are split exactly rather than by hash alone. */
const BALANCE_LIMIT = 20_000;
/** Eval problems of each small stratum by seed (`${seed}|${stratum}`); null for a stratum left to the hash. */
const balanced = new Map<string, Set<string> | null>();

/**
 * The train/eval partition: a problem is held out when its hash falls in the lowest EVAL_FRACTION. In a small
 * stratum (the problems of one class with or without a carry: see evalStrata) chance alone can hold out none of
 * them at all (seed 1 holds out none of the 45 one-digit sums with a carry), so there the eval problems are the
 * stratum's round(EVAL_FRACTION × size) lowest hashes, at least one: every stratum is on both sides, in its
 * share, and the partition is the hash threshold's but for a few problems at its edge.
 */
export function inEvalSplit(space: ProblemSpace, p: ArithmeticProblem): boolean {
  const text = problemText(p);
  const key = `${space.seed}|${stratumOf(p)}`;
  let set = balanced.get(key);
  if (set === undefined) {
    set = balancedEvalSet(space.seed, p);
    balanced.set(key, set);
  }
  return set ? set.has(text) : isEvalTask(space.seed, text, EVAL_FRACTION);
}

function stratumOf(p: ArithmeticProblem): string {
  return `${classOf(p)}${hasCarry(p) ? "+carry" : ""}`;
}

function balancedEvalSet(seed: number, like: ArithmeticProblem): Set<string> | null {
  const c = { key: classOf(like), op: like.op, digitsA: digitsOf(like.a), digitsB: digitsOf(like.b), share: 0 };
  const all = enumerateClass(c, BALANCE_LIMIT);
  if (!all) return null;
  const carry = hasCarry(like);
  const keyed = all.filter((p) => hasCarry(p) === carry).map((p) => ({ text: problemText(p), h: hashOf(seed, "split", problemText(p)) }));
  const k = keyed.length < 2 ? 0 : Math.max(1, Math.round(keyed.length * EVAL_FRACTION));
  keyed.sort((x, y) => x.h - y.h || (x.text < y.text ? -1 : 1));
  return new Set(keyed.slice(0, k).map((x) => x.text));
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

/**
 * A class of the train distribution: the operator and the two operands' digit counts (after subtraction's
 * ordering). sampleProblem picks a class with probability `share`, then operands uniformly within it (but for
 * a = b in a same-digit subtraction, which two draws reach half as often as any other pair).
 */
export interface ProblemClass {
  key: string;
  op: ArithmeticOp;
  digitsA: number;
  digitsB: number;
  share: number;
}

export function classOf(p: ArithmeticProblem): string {
  return `${p.op}${digitsOf(p.a)},${digitsOf(p.b)}`;
}

export function problemClasses(space: ProblemSpace): ProblemClass[] {
  const D = space.digits;
  const out: ProblemClass[] = [];
  for (const op of new Set(space.ops)) {
    // rng.pick over the list: an op listed twice is drawn twice as often.
    const pOp = space.ops.filter((o) => o === op).length / space.ops.length;
    for (let x = 1; x <= D; x++) {
      for (let y = 1; y <= D; y++) {
        // Subtraction puts the longer operand first: (x, y) and (y, x) land in one class.
        if (op === "-" && y > x) continue;
        const ways = op === "-" && x !== y ? 2 : 1;
        out.push({ key: `${op}${x},${y}`, op, digitsA: x, digitsB: y, share: (pOp * ways) / (D * D) });
      }
    }
  }
  return out;
}

/** A draw from sampleProblem given that it falls in class c. */
function sampleInClass(rng: Rng, c: ProblemClass): ArithmeticProblem {
  const a = operandWithDigits(rng, c.digitsA);
  const b = operandWithDigits(rng, c.digitsB);
  return c.op === "-" && c.digitsA === c.digitsB ? ordered(a, c.op, b) : { a, op: c.op, b };
}

const rangeSize = (d: number) => (d === 1 ? 10 : 9 * 10 ** (d - 1));

/** Every problem of class c, when there are at most `limit` (else null). */
function enumerateClass(c: ProblemClass, limit: number): ArithmeticProblem[] | null {
  const same = c.op === "-" && c.digitsA === c.digitsB;
  const n = same ? (rangeSize(c.digitsA) * (rangeSize(c.digitsA) + 1)) / 2 : rangeSize(c.digitsA) * rangeSize(c.digitsB);
  if (n > limit) return null;
  const lo = (d: number) => (d === 1 ? 0 : 10 ** (d - 1));
  const out: ArithmeticProblem[] = [];
  for (let a = lo(c.digitsA); a < 10 ** c.digitsA; a++) {
    for (let b = lo(c.digitsB); b < 10 ** c.digitsB && (!same || b <= a); b++) out.push({ a, op: c.op, b });
  }
  return out;
}

/** Classes up to this many problems are enumerated, so that a small class's eval rows repeat no problem needlessly. */
const ENUMERATE_LIMIT = 200_000;

/**
 * `count` problems drawn with `draw`, keeping those `accept` takes, distinct while distinct ones last: with
 * the pool's size known, its problems are drawn without replacement (in the draw's own proportions) and
 * then cycled in the same order; unknown, a pool is taken as too large to run dry.
 */
function distinctDraws(
  rng: Rng,
  draw: (rng: Rng) => ArithmeticProblem,
  accept: (p: ArithmeticProblem) => boolean,
  count: number,
  poolSize: number | null,
  what: string,
): ArithmeticProblem[] {
  if (poolSize === 0 && count > 0) throw new Error(`arithmetic: no problem for ${what}`);
  const seen = new Set<string>();
  const distinct: ArithmeticProblem[] = [];
  const target = poolSize === null ? count : Math.min(count, poolSize);
  let rejected = 0,
    repeats = 0;
  while (distinct.length < target) {
    const p = draw(rng);
    if (!accept(p)) {
      if (++rejected > 100_000_000) throw new Error(`arithmetic: cannot draw ${what}`);
      continue;
    }
    const text = problemText(p);
    // A pool of unknown size is large: a repeat is all but impossible there, and kept after many in a row.
    if (seen.has(text) && (poolSize !== null || ++repeats < 64)) continue;
    repeats = 0;
    seen.add(text);
    distinct.push(p);
  }
  return Array.from({ length: count }, (_, i) => distinct[i % distinct.length]!);
}

export interface ProblemSplit {
  size: number;
  problem(index: number): ArithmeticProblem;
}

/** A part of the train distribution with its share, drawn from by `draw` + `accept`; `pool` = its distinct eval problems when counted. */
interface Stratum {
  key: string;
  share: number;
  draw(rng: Rng): ArithmeticProblem;
  accept(p: ArithmeticProblem): boolean;
  pool: number | null;
}

/**
 * The strata of the train distribution that the eval split reproduces: each class, and within a class small
 * enough to count, its problems with and without a carry (the tiny classes have so few eval problems, ~10 of
 * the 100 one-digit sums, that their carry share would otherwise be left to chance).
 */
function evalStrata(space: ProblemSpace): Stratum[] {
  const inEval = (p: ArithmeticProblem) => inEvalSplit(space, p);
  const out: Stratum[] = [];
  for (const c of problemClasses(space)) {
    const draw = (rng: Rng) => sampleInClass(rng, c);
    const all = enumerateClass(c, ENUMERATE_LIMIT);
    if (!all) {
      out.push({ key: c.key, share: c.share, draw, accept: inEval, pool: null });
      continue;
    }
    // sampleInClass reaches a = b in a same-digit subtraction half as often as any other pair.
    const weight = (p: ArithmeticProblem) => (p.op === "-" && p.a === p.b ? 0.5 : 1);
    const total = all.reduce((s, p) => s + weight(p), 0);
    for (const carry of [false, true]) {
      const part = all.filter((p) => hasCarry(p) === carry);
      if (part.length === 0) continue;
      out.push({
        key: `${c.key}${carry ? "+carry" : ""}`,
        share: (c.share * part.reduce((s, p) => s + weight(p), 0)) / total,
        draw,
        accept: (p) => hasCarry(p) === carry && inEval(p),
        pool: part.filter(inEval).length,
      });
    }
  }
  return out;
}

/**
 * The eval split follows the train distribution on the eval partition (problems train never draws): each
 * stratum of sampleProblem (evalStrata) gets its share of the rows (rounded), filled with its eval problems
 * in the sampler's own proportions, distinct while the stratum has enough (a stratum of 55 one-digit sums has
 * about 5 eval ones: beyond that its rows repeat them, as train repeats them). A space with fewer eval
 * problems than evalSize gets that many rows.
 */
export function makeEvalSplit(space: ProblemSpace, evalSize: number): ProblemSplit {
  // A stratum without a single eval problem (only in the tiniest spaces) cannot be represented: the rest share its rows.
  const usable = evalStrata(space).filter((x) => x.pool !== 0);
  if (usable.length === 0) throw new Error(`arithmetic: the eval split is empty for digits=${space.digits}`);
  const known = usable.every((x) => x.pool !== null) ? usable.reduce((s, x) => s + x.pool!, 0) : Number.POSITIVE_INFINITY;
  const quotas = apportion(
    Math.min(evalSize, known),
    usable.map((x) => x.share),
  );
  const groups = usable.map((x, i) => distinctDraws(rngFor(space.seed, "eval", x.key), x.draw, x.accept, quotas[i]!, x.pool, `eval stratum ${x.key}`));
  const rows = interleave(rngFor(space.seed, "eval-order"), groups);
  return { size: rows.length, problem: (i) => rows[i]! };
}

/** Whether column addition carries (subtraction: borrows) somewhere; every multi-digit product carries or nearly. */
export function hasCarry(p: ArithmeticProblem): boolean {
  if (p.op === "*") return true;
  let a = p.a,
    b = p.b,
    carry = 0;
  while (a > 0 || b > 0) {
    const x = a % 10,
      y = b % 10;
    if (p.op === "+" ? x + y + carry >= 10 : x - carry < y) return true;
    carry = 0;
    a = Math.floor(a / 10);
    b = Math.floor(b / 10);
  }
  return false;
}

/** The hard split's problems: both operands multi-digit, and a carry (or a borrow). */
export function isHard(p: ArithmeticProblem): boolean {
  return p.a >= 10 && p.b >= 10 && hasCarry(p);
}

/**
 * The "hard" split: eval-partition problems (never drawn by train) with two multi-digit operands and a carry
 * (a borrow for -), each op in its train share, digit counts uniform in 2..digits. Deliberately harder than
 * train, so it is reported under its own name beside eval. Null when digits < 2 (no such problem exists).
 */
export function makeHardSplit(space: ProblemSpace, evalSize: number): ProblemSplit | null {
  if (space.digits < 2) return null;
  const accept = (p: ArithmeticProblem) => isHard(p) && inEvalSplit(space, p);
  const ops = [...new Set(space.ops)];
  const pools = ops.map((op) => {
    const classes = problemClasses({ ...space, ops: [op] }).filter((c) => c.digitsA >= 2 && c.digitsB >= 2);
    let pool: number | null = 0;
    for (const c of classes) {
      const all = enumerateClass(c, ENUMERATE_LIMIT);
      pool = all && pool !== null ? pool + all.filter(accept).length : null;
    }
    return pool;
  });
  const usable = ops.map((op, i) => ({ op, pool: pools[i]! })).filter((x) => x.pool !== 0);
  if (usable.length === 0) return null;
  const known = usable.every((x) => x.pool !== null) ? usable.reduce((s, x) => s + x.pool!, 0) : Number.POSITIVE_INFINITY;
  const size = Math.min(evalSize, known);
  const quotas = apportion(
    size,
    usable.map((x) => space.ops.filter((o) => o === x.op).length),
  );
  const draw = (op: ArithmeticOp) => (rng: Rng) =>
    ordered(operandWithDigits(rng, rng.int(2, space.digits)), op, operandWithDigits(rng, rng.int(2, space.digits)));
  const groups = usable.map(({ op, pool }, i) => distinctDraws(rngFor(space.seed, "hard", op), draw(op), accept, quotas[i]!, pool, `hard ${op}`));
  const rows = interleave(rngFor(space.seed, "hard-order"), groups);
  return { size: rows.length, problem: (i) => rows[i]! };
}
