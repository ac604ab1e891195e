import { Parser, PlainParser, type ParseResult } from "./parser.js";

/**
 * Reasoning models write `<think>…</think>` then the answer. The answer is read from the text after the
 * last `</think>` by an inner parser; a reply without `</think>` is parsed whole (lenient) but scores 0 on
 * format.
 */
export class ThinkParser extends Parser {
  readonly name: string;
  constructor(private readonly inner: Parser = new PlainParser()) {
    super();
    this.name = `think(${inner.name})`;
  }

  parseText(text: string): ParseResult {
    return this.inner.parseText(afterThink(text));
  }

  formatScore(text: string): number {
    const t = text.trimStart();
    if (!t.startsWith("<think>")) return 0;
    if (count(t, "<think>") !== 1 || count(t, "</think>") !== 1) return 0;
    const after = afterThink(t);
    if (!after.trim()) return 0;
    return this.inner.formatScore(after);
  }
}

function afterThink(text: string): string {
  const end = text.lastIndexOf("</think>");
  return end >= 0 ? text.slice(end + "</think>".length) : text;
}

function count(s: string, sub: string): number {
  let n = 0;
  for (let i = s.indexOf(sub); i >= 0; i = s.indexOf(sub, i + sub.length)) n++;
  return n;
}
