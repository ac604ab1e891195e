import { solve, type ArithmeticProblem } from "./problem.js";

/**
 * A short worked solution a small model can learn to imitate, column by column from the units, then the
 * answer after the last ";" (the parser takes the last integer):
 *   37+45  ->  7+5=12;3+4+1=8;82          (a "+1" is the carry from the column before)
 *   52-17  ->  12-7=5;4-1=3;35            (12 = borrowed 2; the next column's 5 became 4)
 *   37*45  ->  37*5=185;37*40=1480;185+1480=1665;1665
 */
export function workedSolution(p: ArithmeticProblem): string {
  const steps = p.op === "+" ? addSteps(p.a, p.b) : p.op === "-" ? subSteps(p.a, p.b) : mulSteps(p.a, p.b);
  return [...steps, String(solve(p))].join(";");
}

/**
 * The worked solution of a weak teacher that forgets every carry: 37+45 -> 7+5=12;3+4=7;72. Its steps
 * are self-consistent, so a model imitating it learns a systematic, verifiably wrong habit that RL
 * against the verifier can correct (what the demo shows).
 */
export function carryDroppingSolution(p: ArithmeticProblem): string {
  if (p.op !== "+") return workedSolution(p);
  const cols = columns(p.a, p.b);
  const steps = cols.map(([x, y]) => `${x}+${y}=${x + y}`);
  // Without carries each column keeps its last digit, except the top one, written out whole.
  let answer = "";
  cols.forEach(([x, y], i) => {
    const s = x + y;
    answer = (i === cols.length - 1 ? String(s) : String(s % 10)) + answer;
  });
  return [...steps, String(Number(answer))].join(";");
}

function columns(a: number, b: number): Array<[number, number]> {
  const da = String(a).split("").reverse().map(Number);
  const db = String(b).split("").reverse().map(Number);
  const n = Math.max(da.length, db.length);
  return Array.from({ length: n }, (_, i) => [da[i] ?? 0, db[i] ?? 0]);
}

function addSteps(a: number, b: number): string[] {
  let carry = 0;
  return columns(a, b).map(([x, y]) => {
    const s = x + y + carry;
    const step = carry ? `${x}+${y}+1=${s}` : `${x}+${y}=${s}`;
    carry = s >= 10 ? 1 : 0;
    return step;
  });
}

function subSteps(a: number, b: number): string[] {
  let borrow = 0;
  return columns(a, b).map(([x0, y]) => {
    let x = x0 - borrow;
    borrow = 0;
    if (x < y) {
      x += 10;
      borrow = 1;
    }
    return `${x}-${y}=${x - y}`;
  });
}

/** The operand with fewer digits is the multiplier, so 2*836 takes one step, not three. */
function mulSteps(x: number, y: number): string[] {
  const [a, b] = String(y).length > String(x).length ? [y, x] : [x, y];
  const digits = String(b).split("").reverse().map(Number);
  const partials: number[] = [];
  const steps: string[] = [];
  digits.forEach((d, i) => {
    if (d === 0 && digits.length > 1) return;
    const m = d * 10 ** i;
    partials.push(a * m);
    steps.push(`${a}*${m}=${a * m}`);
  });
  if (partials.length > 1) steps.push(`${partials.join("+")}=${partials.reduce((s, x) => s + x, 0)}`);
  return steps;
}
