import { Parser, type ParseResult } from "./parser.js";

/** The content of the last `\boxed{…}` (or `\fbox{…}`) with balanced braces, or `\boxed 5`; null when none. */
export function extractBoxed(text: string): string | null {
  let best: string | null = null;
  const re = /\\(?:boxed|fbox)\s*/g;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const at = m.index + m[0].length;
    if (text[at] === "{") {
      let depth = 0;
      for (let i = at; i < text.length; i++) {
        const c = text[i];
        if (c === "\\") {
          i++;
          continue;
        } // \{ and \} are literal braces inside the box
        if (c === "{") depth++;
        else if (c === "}" && --depth === 0) {
          best = text.slice(at + 1, i);
          break;
        }
      }
    } else {
      const short = /^[^\s$]+/.exec(text.slice(at));
      if (short && m[0].endsWith(" ")) best = short[0];
    }
  }
  return best === null ? null : best.trim();
}

/** Math answers written as `\boxed{…}`; the last box wins. */
export class BoxedParser extends Parser {
  readonly name: string = "boxed";
  parseText(text: string): ParseResult {
    const b = extractBoxed(text);
    if (b === null) return { answer: null, reason: "no \\boxed{} answer" };
    if (!b) return { answer: null, reason: "empty \\boxed{}" };
    return { answer: b };
  }
  formatScore(text: string): number {
    const b = extractBoxed(text);
    return b ? 1 : 0;
  }
}
