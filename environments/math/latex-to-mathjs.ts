/**
 * Converts one LaTeX expression (no sets, intervals or equations: see answer-structure.ts) into mathjs
 * syntax: \frac, \sqrt[n]{}, \binom, ^{} and _{} groups, \cdot/\times/\div, \pi, \infty, trig and log
 * functions with or without parentheses, Greek letters, mixed numbers (2\frac{1}{2} = 5/2) and implicit
 * multiplication of single-letter variables (2xy = 2*x*y). Unsupported notation throws.
 */
const FUNCTIONS: Record<string, string> = {
  sin: "sin",
  cos: "cos",
  tan: "tan",
  sec: "sec",
  csc: "csc",
  cot: "cot",
  arcsin: "asin",
  arccos: "acos",
  arctan: "atan",
  sinh: "sinh",
  cosh: "cosh",
  tanh: "tanh",
  ln: "log",
  log: "log10",
  exp: "exp",
};
const GREEK = [
  "alpha",
  "beta",
  "gamma",
  "delta",
  "epsilon",
  "varepsilon",
  "zeta",
  "eta",
  "theta",
  "vartheta",
  "iota",
  "kappa",
  "lambda",
  "mu",
  "nu",
  "xi",
  "rho",
  "sigma",
  "tau",
  "upsilon",
  "phi",
  "varphi",
  "chi",
  "psi",
  "omega",
  "Gamma",
  "Delta",
  "Theta",
  "Lambda",
  "Xi",
  "Sigma",
  "Phi",
  "Psi",
  "Omega",
];
/** Identifiers our output may contain that are not single-letter variables. */
export const MATHJS_FUNCTIONS = new Set([...Object.values(FUNCTIONS), "sqrt", "nthRoot", "combinations", "abs", "factorial"]);
export const MATHJS_CONSTANTS = new Set(["pi", "e", "i", "Infinity"]);
const KEEP = new Set([...MATHJS_FUNCTIONS, ...MATHJS_CONSTANTS, ...GREEK.map((g) => `g_${g}`)]);

export function latexToMathjs(latex: string): string {
  // Mixed numbers: a whole number directly followed by a numeric fraction.
  const mixed = latex.replace(/(^|[^\d.}])(\d+)\s*\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}/g, "$1($2+\\frac{$3}{$4})");
  const out = new Converter(mixed).run();
  // Split runs of letters into single-letter variables (implicit multiplication), keeping known names.
  return out.replace(/[A-Za-z][A-Za-z0-9_]*/g, (id) => (KEEP.has(id) || id.includes("_") || id.length === 1 ? id : id.split("").join(" ")));
}

class Converter {
  private i = 0;
  constructor(private readonly s: string) {}

  run(): string {
    let out = "";
    while (this.i < this.s.length) out += this.next();
    return out;
  }

  private next(): string {
    const c = this.s[this.i]!;
    if (c === "\\") return this.command();
    if (c === "{") return `(${this.convertGroup(this.braceGroup())})`;
    if (c === "}") throw new Error("unbalanced }");
    if (c === "^") {
      this.i++;
      this.skipSpace();
      return `^(${this.convertGroup(this.argument())})`;
    }
    if (c === "_") {
      this.i++;
      const sub = this.argument().replace(/[^A-Za-z0-9]/g, "");
      return `_${sub}`;
    }
    if (c === "|") throw new Error("absolute value bars are not supported");
    this.i++;
    return c;
  }

  private command(): string {
    const m = /^\\([A-Za-z]+|.)/.exec(this.s.slice(this.i));
    if (!m) throw new Error("dangling backslash");
    this.i += m[0].length;
    const cmd = m[1]!;
    switch (cmd) {
      case "frac": {
        const a = this.convertGroup(this.argument());
        const b = this.convertGroup(this.argument());
        return `((${a})/(${b}))`;
      }
      case "sqrt": {
        this.skipSpace();
        let n: string | undefined;
        if (this.s[this.i] === "[") {
          const end = this.s.indexOf("]", this.i);
          if (end < 0) throw new Error("unclosed \\sqrt[");
          n = this.s.slice(this.i + 1, end);
          this.i = end + 1;
        }
        const a = this.convertGroup(this.argument());
        return n === undefined ? ` sqrt(${a})` : ` nthRoot(${a}, ${this.convertGroup(n)})`;
      }
      case "binom":
      case "dbinom":
      case "tbinom": {
        const n = this.convertGroup(this.argument());
        const k = this.convertGroup(this.argument());
        return ` combinations(${n}, ${k})`;
      }
      case "cdot":
      case "times":
      case "ast":
        return "*";
      case "div":
        return "/";
      case "pi":
        return " pi ";
      case "infty":
      case "infin":
        return " Infinity ";
      case "%":
        return "/100";
      case "{":
        return "(";
      case "}":
        return ")";
      case "operatorname":
        return this.func(this.braceGroup().trim());
      default:
        if (cmd in FUNCTIONS) return this.func(cmd);
        if (GREEK.includes(cmd)) return ` g_${cmd} `;
        throw new Error(`unsupported LaTeX \\${cmd}`);
    }
  }

  /** fn, fn^k, fn_b (log base), then an argument: (…), {…} or one token. */
  private func(name: string): string {
    const fn = FUNCTIONS[name];
    if (!fn) throw new Error(`unsupported function ${name}`);
    let power: string | undefined;
    let base: string | undefined;
    for (;;) {
      this.skipSpace();
      if (this.s[this.i] === "^") {
        this.i++;
        power = this.convertGroup(this.argument());
      } else if (this.s[this.i] === "_" && name === "log") {
        this.i++;
        base = this.convertGroup(this.argument());
      } else break;
    }
    this.skipSpace();
    let arg: string;
    if (this.s[this.i] === "(") {
      const end = this.matching(this.i, "(", ")");
      arg = this.convertGroup(this.s.slice(this.i + 1, end));
      this.i = end + 1;
    } else {
      const tok = /^(?:\\[A-Za-z]+|[A-Za-z]|\d+(?:\.\d+)?)/.exec(this.s.slice(this.i));
      if (this.s[this.i] === "{") arg = this.convertGroup(this.braceGroup());
      else if (tok) {
        this.i += tok[0].length;
        arg = this.convertGroup(tok[0]);
      } else throw new Error(`missing argument for ${name}`);
    }
    const call = base !== undefined ? `(log(${arg})/log(${base}))` : ` ${fn}(${arg})`;
    return power !== undefined ? `((${call})^(${power}))` : call;
  }

  /** A brace group's content, or a single character / command as LaTeX allows (\frac12). */
  private argument(): string {
    this.skipSpace();
    const c = this.s[this.i];
    if (c === undefined) throw new Error("missing argument");
    if (c === "{") return this.braceGroup();
    if (c === "\\") {
      const m = /^\\([A-Za-z]+|.)/.exec(this.s.slice(this.i))!;
      this.i += m[0].length;
      return m[0];
    }
    this.i++;
    return c;
  }

  private braceGroup(): string {
    const end = this.matching(this.i, "{", "}");
    const inner = this.s.slice(this.i + 1, end);
    this.i = end + 1;
    return inner;
  }

  private matching(at: number, open: string, close: string): number {
    let depth = 0;
    for (let j = at; j < this.s.length; j++) {
      if (this.s[j] === "\\") {
        j++;
        continue;
      }
      if (this.s[j] === open) depth++;
      else if (this.s[j] === close && --depth === 0) return j;
    }
    throw new Error(`unclosed ${open}`);
  }

  private convertGroup(text: string): string {
    return new Converter(text).run();
  }

  private skipSpace(): void {
    while (this.s[this.i] === " ") this.i++;
  }
}
