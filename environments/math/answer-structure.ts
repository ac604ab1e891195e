/**
 * Reads a LaTeX answer into its structure (sets, tuples/intervals, unions, equations, percentages,
 * plain expressions, text) so that equivalence can be checked piece by piece. Leaves keep their LaTeX;
 * latex-to-mathjs.ts turns a leaf into an expression.
 */
export type MathAnswer =
  | { kind: "expr"; src: string; latex: string; percent: boolean }
  | { kind: "set"; src: string; items: MathAnswer[]; braced: boolean }
  | { kind: "tuple"; src: string; open: "(" | "["; close: ")" | "]"; items: MathAnswer[] }
  | { kind: "union"; src: string; parts: MathAnswer[] }
  | { kind: "equation"; src: string; lhs: string; rhs: MathAnswer }
  | { kind: "text"; src: string; text: string };

const MAX_LENGTH = 2000;

/** Notation that carries no value: math delimiters, spacing, sizing, \displaystyle, degrees, units in \text. */
export function normalizeLatex(raw: string): string {
  let s = raw.trim();
  if (s.length > MAX_LENGTH) throw new Error(`answer longer than ${MAX_LENGTH} characters`);
  for (let changed = true; changed; ) {
    const before = s;
    s = s
      .replace(/^\$+([\s\S]*?)\$+$/, "$1")
      .replace(/^\\\(([\s\S]*)\\\)$/, "$1")
      .replace(/^\\\[([\s\S]*)\\\]$/, "$1")
      .trim();
    changed = s !== before;
  }
  s = s
    .replace(/[\u2212\u2013]/g, "-")
    .replace(/[\u00d7\u22c5\u00b7]/g, "\\cdot ")
    .replace(/\u00f7/g, "\\div ")
    .replace(/\u03c0/g, "\\pi ")
    .replace(/\u221e/g, "\\infty ")
    .replace(/\u221a/g, "\\sqrt")
    .replace(/\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])\.?/g, "")
    .replace(/\\(?:displaystyle|textstyle|scriptstyle)(?![A-Za-z])/g, "")
    .replace(/\\[,;:! ]/g, " ")
    .replace(/~/g, " ")
    .replace(/\\[dt]frac(?![A-Za-z])/g, "\\frac")
    .replace(/\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![A-Za-z])|\u00b0/g, "")
    .replace(/\{,\}/g, "")
    .replace(/\\\$/g, "");
  s = s.replace(/\\(?:text|mbox|textrm|textit|textbf|mathrm)\s*\{\s*(?:and|or)\s*\}/g, ",");
  s = s.replace(/\s+(?:and|or)\s+/g, ",");
  s = s.trim().replace(/\.$/, "").trim();
  if (/^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$/.test(s)) s = s.replace(/,/g, "");
  return s;
}

const TEXT_ONLY = /^\\(?:text|mbox|textrm|textit|textbf|mathrm)\s*\{([^{}]*)\}$/;
const TEXT_BLOCK = /\\(?:text|mbox|textrm|textit|textbf|mathrm|mathbf)\s*\{([^{}]*)\}/g;

export function parseMathAnswer(raw: string): MathAnswer {
  const s = normalizeLatex(raw);
  const only = TEXT_ONLY.exec(s);
  if (only) return { kind: "text", src: s, text: only[1]!.trim() };
  // Words inside an expression are units ("5\text{ cm}"): drop them; numbers inside \text stay.
  const stripped = s.replace(TEXT_BLOCK, (_, inner: string) => (/[A-Za-z]/.test(inner) ? " " : inner)).trim();
  if (!stripped) return { kind: "text", src: s, text: s };
  return structure(stripped);
}

function structure(s: string): MathAnswer {
  s = s.trim();
  if (s === "\\emptyset" || s === "\\varnothing" || s === "\\{\\}") return { kind: "set", src: s, items: [], braced: true };

  const unionParts = splitTopLevel(s, /^\\cup(?![A-Za-z])/);
  if (unionParts.length > 1) return { kind: "union", src: s, parts: unionParts.map(structure) };

  if (s.startsWith("\\{") && s.endsWith("\\}") && matchingClose(s, 0) === s.length - 2) {
    const inner = s.slice(2, -2).trim();
    return { kind: "set", src: s, braced: true, items: inner ? splitTopLevel(inner, /^,/).map(structure) : [] };
  }

  if ((s[0] === "(" || s[0] === "[") && (s.endsWith(")") || s.endsWith("]")) && matchingClose(s, 0) === s.length - 1) {
    const items = splitTopLevel(s.slice(1, -1), /^,/);
    if (items.length > 1) {
      return { kind: "tuple", src: s, open: s[0] as "(" | "[", close: s[s.length - 1] as ")" | "]", items: items.map(structure) };
    }
  }

  const list = splitTopLevel(s, /^,/);
  if (list.length > 1) return { kind: "set", src: s, braced: false, items: list.map(structure) };

  const pm = topLevelIndex(s, /^\\(?:pm|mp)(?![A-Za-z])/);
  if (pm >= 0) {
    // \pm and \mp are both 3 characters; a \pm b and a \mp b are the same two-element set.
    const a = s.slice(0, pm) + "+" + s.slice(pm + 3);
    const b = s.slice(0, pm) + "-" + s.slice(pm + 3);
    return { kind: "set", src: s, braced: false, items: [structure(a), structure(b)] };
  }

  const eq = topLevelIndex(s, /^=/);
  if (eq > 0) {
    const lhs = s.slice(0, eq).trim();
    if (/^(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?(?:\([A-Za-z]\))?$/.test(lhs)) {
      return { kind: "equation", src: s, lhs: lhs.replace(/\s+/g, ""), rhs: structure(s.slice(eq + 1)) };
    }
  }

  let latex = s;
  let percent = false;
  const pct = /\s*\\?%\s*$/.exec(latex);
  if (pct) {
    percent = true;
    latex = latex.slice(0, pct.index).trim();
  }
  return { kind: "expr", src: s, latex, percent };
}

/** Brackets that nest: (, [, { and \{ open; ), ], } and \} close (intervals mix them, so any closes any). */
function depthDelta(s: string, i: number): { delta: number; width: number } {
  const c = s[i];
  if (c === "\\" && (s[i + 1] === "{" || s[i + 1] === "}")) return { delta: s[i + 1] === "{" ? 1 : -1, width: 2 };
  if (c === "\\") return { delta: 0, width: /^\\[A-Za-z]+/.exec(s.slice(i))?.[0].length ?? 2 };
  if (c === "(" || c === "[" || c === "{") return { delta: 1, width: 1 };
  if (c === ")" || c === "]" || c === "}") return { delta: -1, width: 1 };
  return { delta: 0, width: 1 };
}

function matchingClose(s: string, open: number): number {
  let depth = 0;
  for (let i = open; i < s.length; ) {
    const { delta, width } = depthDelta(s, i);
    depth += delta;
    if (depth === 0) return i;
    i += width;
  }
  return -1;
}

function topLevelIndex(s: string, sep: RegExp): number {
  let depth = 0;
  for (let i = 0; i < s.length; ) {
    if (depth === 0 && sep.test(s.slice(i))) return i;
    const { delta, width } = depthDelta(s, i);
    depth += delta;
    i += width;
  }
  return -1;
}

export function splitTopLevel(s: string, sep: RegExp): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < s.length; ) {
    if (depth === 0) {
      const m = sep.exec(s.slice(i));
      if (m) {
        parts.push(s.slice(start, i).trim());
        i += m[0].length;
        start = i;
        continue;
      }
    }
    const { delta, width } = depthDelta(s, i);
    depth += delta;
    i += width;
  }
  parts.push(s.slice(start).trim());
  return parts;
}
