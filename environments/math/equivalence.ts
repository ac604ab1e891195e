import { create, all, type MathNode } from "mathjs";
import { parseMathAnswer, type MathAnswer } from "./answer-structure.js";
import { latexToMathjs, MATHJS_CONSTANTS, MATHJS_FUNCTIONS } from "./latex-to-mathjs.js";

/**
 * Mathematical equivalence of a predicted answer to a gold answer, both LaTeX, in the spirit of
 * math-verify: the gold answer's structure decides how the prediction is read (a gold set accepts the
 * elements in any order, a gold interval needs the same brackets, a gold "x = 5" accepts "5", a gold
 * percentage accepts 25\%, 25 or 0.25). Expressions are compared by evaluating both with mathjs at the
 * same random points (so x^2+2x+1 equals (x+1)^2), to 1e-6 relative precision.
 *
 * This is synchronous CPU work on untrusted text: run it through MathVerifier for a time limit.
 */
export interface Equivalence {
  equal: boolean;
  /** Why not equal (or which rule matched), for the score record. */
  reason: string;
}

const math = create(all, {});
const ALLOWED_OPS = new Set(["add", "subtract", "multiply", "divide", "pow", "unaryMinus", "unaryPlus", "factorial"]);
const TRIALS = 3;
const REL_TOL = 1e-6;

export function mathEqual(gold: string, pred: string): Equivalence {
  let g: MathAnswer;
  try {
    g = parseMathAnswer(gold);
  } catch (err) {
    throw new Error(`gold answer ${JSON.stringify(gold)} cannot be read: ${(err as Error).message}`);
  }
  let p: MathAnswer;
  try {
    p = parseMathAnswer(pred);
  } catch (err) {
    return { equal: false, reason: `cannot read answer: ${(err as Error).message}` };
  }
  if (compact(g.src) === compact(p.src)) return { equal: true, reason: "identical" };
  try {
    return answersEqual(g, p) ? { equal: true, reason: "equivalent" } : { equal: false, reason: `not equivalent to ${gold}` };
  } catch (err) {
    return { equal: false, reason: `cannot compare: ${(err as Error).message}` };
  }
}

function compact(s: string): string {
  return s.replace(/\s+/g, "");
}

function answersEqual(g: MathAnswer, p: MathAnswer): boolean {
  switch (g.kind) {
    case "text":
      return p.kind === "text" ? normText(g.text) === normText(p.text) : normText(g.text) === normText(p.src);
    case "expr": {
      const s = asScalar(p);
      return s !== null && scalarEqual(g, s);
    }
    case "equation":
      if (p.kind === "equation") return (p.lhs === g.lhs || sameSymbolOnly(g.lhs, p.lhs)) && answersEqual(g.rhs, p.rhs);
      return answersEqual(g.rhs, p);
    case "set": {
      const items = p.kind === "set" ? p.items : g.items.length === 1 ? [p] : null;
      return items !== null && unorderedEqual(g.items, items.map(unwrapEquation));
    }
    case "tuple":
      return (
        p.kind === "tuple" &&
        p.open === g.open &&
        p.close === g.close &&
        p.items.length === g.items.length &&
        g.items.every((gi, k) => answersEqual(gi, p.items[k]!))
      );
    case "union": {
      const parts = p.kind === "union" ? p.parts : g.parts.length === 1 ? [p] : null;
      return parts !== null && unorderedEqual(g.parts, parts);
    }
  }
}

function sameSymbolOnly(a: string, b: string): boolean {
  return a.replace(/[{}]/g, "") === b.replace(/[{}]/g, "");
}

/** "x = 3" as an element of a solution set means 3. */
function unwrapEquation(a: MathAnswer): MathAnswer {
  return a.kind === "equation" ? unwrapEquation(a.rhs) : a;
}

function asScalar(p: MathAnswer): Extract<MathAnswer, { kind: "expr" }> | null {
  if (p.kind === "expr") return p;
  if (p.kind === "equation") return asScalar(p.rhs);
  if (p.kind === "set" && p.items.length === 1) return asScalar(p.items[0]!);
  return null;
}

/** Greedy matching is enough: equivalence is transitive, so any match is as good as any other. */
function unorderedEqual(gs: MathAnswer[], ps: MathAnswer[]): boolean {
  if (gs.length !== ps.length) return false;
  const used = new Array<boolean>(ps.length).fill(false);
  for (const gi of gs) {
    const k = ps.findIndex((pi, j) => !used[j] && safeEqual(gi, pi));
    if (k < 0) return false;
    used[k] = true;
  }
  return true;
}

function safeEqual(a: MathAnswer, b: MathAnswer): boolean {
  try {
    return compact(a.src) === compact(b.src) || answersEqual(a, b);
  } catch {
    return false;
  }
}

function normText(s: string): string {
  return s
    .toLowerCase()
    .replace(/\\text\{([^{}]*)\}/g, "$1")
    .replace(/[\s.$]/g, "");
}

interface Compiled {
  vars: string[];
  evaluate(scope: Record<string, number>): { re: number; im: number };
  hasInfinity: boolean;
}

const compiledCache = new Map<string, Compiled>();

function compile(latex: string): Compiled {
  const hit = compiledCache.get(latex);
  if (hit) return hit;
  const text = latexToMathjs(latex);
  if (!text.trim()) throw new Error("empty expression");
  let node: MathNode;
  try {
    node = math.parse(text);
  } catch (err) {
    throw new Error(`cannot parse ${JSON.stringify(latex)}: ${(err as Error).message}`);
  }
  const vars = new Set<string>();
  // Only arithmetic reaches evaluation: no assignment, no unit conversion, no mathjs built-ins by name.
  // Every free symbol is renamed into a private namespace so "phi" or "c" can never mean a mathjs constant.
  const safe = node.transform((n: MathNode, path: string, parent: MathNode | null) => {
    if (n.type === "SymbolNode") {
      const name = (n as unknown as { name: string }).name;
      if (parent?.type === "FunctionNode" && path === "fn") {
        if (!MATHJS_FUNCTIONS.has(name)) throw new Error(`function ${name} is not allowed`);
        return n;
      }
      if (MATHJS_CONSTANTS.has(name)) return n;
      vars.add(name);
      return new math.SymbolNode(`v_${name}`);
    }
    if (n.type === "OperatorNode" && !ALLOWED_OPS.has((n as unknown as { fn: string }).fn)) {
      throw new Error(`operator ${(n as unknown as { op: string }).op} is not allowed`);
    }
    if (!["ConstantNode", "OperatorNode", "ParenthesisNode", "FunctionNode"].includes(n.type)) {
      throw new Error(`${n.type} is not allowed`);
    }
    return n;
  });
  const code = safe.compile();
  const compiled: Compiled = {
    vars: [...vars],
    hasInfinity: text.includes("Infinity"),
    evaluate(scope) {
      const v: unknown = code.evaluate(Object.fromEntries(Object.entries(scope).map(([k, x]) => [`v_${k}`, x])));
      if (typeof v === "number") return { re: v, im: 0 };
      if (v && typeof v === "object" && "re" in v && "im" in v) return { re: Number(v.re), im: Number(v.im) };
      throw new Error(`${JSON.stringify(latex)} does not evaluate to a number`);
    },
  };
  if (compiledCache.size > 1000) compiledCache.clear();
  compiledCache.set(latex, compiled);
  return compiled;
}

/** A fixed, generic value per (variable, trial): far from the special points 0, ±1, where identities fail. */
function pointValue(name: string, trial: number): number {
  let h = 2166136261;
  for (const ch of `${name}#${trial}`) h = Math.imul(h ^ ch.charCodeAt(0), 16777619);
  return 0.5 + ((h >>> 0) / 4294967296) * 2;
}

function scalarEqual(g: Extract<MathAnswer, { kind: "expr" }>, p: Extract<MathAnswer, { kind: "expr" }>): boolean {
  const cg = compile(g.latex);
  const cp = compile(p.latex);
  const vars = [...new Set([...cg.vars, ...cp.vars])];
  // Percentages: the gold's form decides; 25\% matches 25\%, 25 and 0.25; a gold 0.25 accepts 25\%.
  const scales: Array<[number, number]> =
    g.percent && !p.percent
      ? [
          [1, 1],
          [0.01, 1],
        ]
      : !g.percent && p.percent
        ? [
            [1, 1],
            [1, 0.01],
          ]
        : [[1, 1]];
  return scales.some(([sg, sp]) => {
    for (let t = 0; t < TRIALS; t++) {
      const scope = Object.fromEntries(vars.map((v) => [v, pointValue(v, t)]));
      const a = cg.evaluate(scope);
      const b = cp.evaluate(scope);
      if (!close(a, b, sg, sp, cg.hasInfinity, cp.hasInfinity)) return false;
      if (vars.length === 0) break; // constants: one evaluation decides
    }
    return true;
  });
}

function close(a: { re: number; im: number }, b: { re: number; im: number }, sa: number, sb: number, infA: boolean, infB: boolean): boolean {
  const ar = a.re * sa,
    ai = a.im * sa,
    br = b.re * sb,
    bi = b.im * sb;
  if (![ar, ai, br, bi].every(Number.isFinite)) {
    // Infinity only counts where the answer wrote \infty; overflowing arithmetic is not an answer.
    if (!(infA && infB)) return false;
    return ar === br && ai === bi;
  }
  const scale = Math.max(1, Math.hypot(ar, ai), Math.hypot(br, bi));
  return Math.hypot(ar - br, ai - bi) <= REL_TOL * scale;
}
