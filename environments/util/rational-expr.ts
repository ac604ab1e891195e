/**
 * Exact arithmetic on untrusted expression text: integers and decimals, + - * / ^ (small integer powers),
 * parentheses, unary minus. Values are BigInt rationals, so 1/3*3 is exactly 1 and a Countdown or
 * calculator answer is judged without float error. Never uses eval; size and depth are bounded.
 */
export interface Rational {
  n: bigint;
  d: bigint; // > 0, gcd(n, d) = 1
}

export interface ParsedExpr {
  value: Rational;
  /** Every number literal in order of appearance (as written, e.g. "25", "0.5"). */
  numbers: string[];
  /** Binary operators used. */
  ops: Set<string>;
}

const MAX_LENGTH = 500;
const MAX_DEPTH = 64;
const MAX_POW = 64;
const MAX_DIGITS = 400; // bounds BigInt growth from chains of * and ^

function gcd(a: bigint, b: bigint): bigint {
  if (a < 0n) a = -a;
  if (b < 0n) b = -b;
  while (b) [a, b] = [b, a % b];
  return a;
}

export function rat(n: bigint, d = 1n): Rational {
  if (d === 0n) throw new Error("division by zero");
  if (d < 0n) [n, d] = [-n, -d];
  const g = gcd(n, d) || 1n;
  const r = { n: n / g, d: d / g };
  if (r.n.toString().length > MAX_DIGITS || r.d.toString().length > MAX_DIGITS) throw new Error("number too large");
  return r;
}

const add = (a: Rational, b: Rational) => rat(a.n * b.d + b.n * a.d, a.d * b.d);
const sub = (a: Rational, b: Rational) => rat(a.n * b.d - b.n * a.d, a.d * b.d);
const mul = (a: Rational, b: Rational) => rat(a.n * b.n, a.d * b.d);
const div = (a: Rational, b: Rational) => {
  if (b.n === 0n) throw new Error("division by zero");
  return rat(a.n * b.d, a.d * b.n);
};
function pow(a: Rational, b: Rational): Rational {
  if (b.d !== 1n) throw new Error("only integer powers are supported");
  const e = Number(b.n);
  if (Math.abs(e) > MAX_POW) throw new Error(`power too large (at most ${MAX_POW})`);
  let r = rat(1n);
  for (let k = 0; k < Math.abs(e); k++) r = mul(r, a);
  return e < 0 ? div(rat(1n), r) : r;
}

export function parseRationalExpr(text: string): ParsedExpr {
  if (text.length > MAX_LENGTH) throw new Error(`expression longer than ${MAX_LENGTH} characters`);
  const src = text
    .replace(/\u00d7/g, "*")
    .replace(/\u00f7/g, "/")
    .replace(/\u2212/g, "-");
  let i = 0;
  const numbers: string[] = [];
  const ops = new Set<string>();
  const ws = () => {
    while (src[i] === " " || src[i] === "\t" || src[i] === "\n") i++;
  };
  const expr = (depth: number): Rational => {
    if (depth > MAX_DEPTH) throw new Error("expression nested too deeply");
    let v = term(depth);
    for (;;) {
      ws();
      const c = src[i];
      if (c !== "+" && c !== "-") return v;
      i++;
      ops.add(c);
      const r = term(depth);
      v = c === "+" ? add(v, r) : sub(v, r);
    }
  };
  // Unary minus binds looser than ^ (-2^2 = -4) but the exponent may be signed (2^-2).
  const term = (depth: number): Rational => {
    let v = unary(depth);
    for (;;) {
      ws();
      const c = src[i];
      if (c !== "*" && c !== "/") return v;
      if (c === "*" && src[i + 1] === "*") return v;
      i++;
      ops.add(c);
      const r = unary(depth);
      v = c === "*" ? mul(v, r) : div(v, r);
    }
  };
  const unary = (depth: number): Rational => {
    if (depth > MAX_DEPTH) throw new Error("expression nested too deeply");
    ws();
    if (src[i] === "-") {
      i++;
      return sub(rat(0n), unary(depth + 1));
    }
    if (src[i] === "+") {
      i++;
      return unary(depth + 1);
    }
    return power(depth);
  };
  const power = (depth: number): Rational => {
    const base = atom(depth);
    ws();
    if (src[i] === "^" || (src[i] === "*" && src[i + 1] === "*")) {
      i += src[i] === "^" ? 1 : 2;
      ops.add("^");
      return pow(base, unary(depth + 1));
    }
    return base;
  };
  const atom = (depth: number): Rational => {
    ws();
    if (src[i] === "(") {
      i++;
      const v = expr(depth + 1);
      ws();
      if (src[i] !== ")") throw new Error(`expected ) at position ${i}`);
      i++;
      return v;
    }
    const m = /^\d+(?:\.\d+)?/.exec(src.slice(i));
    if (!m) throw new Error(src[i] === undefined ? "unexpected end of expression" : `unexpected "${src[i]}" at position ${i}`);
    i += m[0].length;
    numbers.push(m[0]);
    const [whole, frac = ""] = m[0].split(".");
    return rat(BigInt(whole! + frac), 10n ** BigInt(frac.length));
  };
  const value = expr(0);
  ws();
  if (i < src.length) throw new Error(`unexpected "${src[i]}" at position ${i}`);
  return { value, numbers, ops };
}

export function ratEquals(a: Rational, b: Rational): boolean {
  return a.n === b.n && a.d === b.d;
}

/** An integer as "42", otherwise a decimal rounded to 10 places ("0.3333333333") or the exact fraction. */
export function formatRational(r: Rational): string {
  if (r.d === 1n) return r.n.toString();
  const neg = r.n < 0n;
  const n = neg ? -r.n : r.n;
  const scaled = (n * 10n ** 10n + r.d / 2n) / r.d;
  const s = scaled.toString().padStart(11, "0");
  const txt = `${s.slice(0, -10)}.${s.slice(-10)}`.replace(/0+$/, "").replace(/\.$/, "");
  return (neg ? "-" : "") + txt;
}
