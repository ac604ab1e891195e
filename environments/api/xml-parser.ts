import { Parser, type ParseResult } from "./parser.js";

/**
 * Replies made of XML-style fields, e.g. `<reasoning>…</reasoning><answer>…</answer>`. The answer is the
 * last occurrence of answerField. A final field left unclosed at the end of the reply (generation cut by
 * a stop string) is still read, but scores 0 on format.
 */
export class XMLParser extends Parser {
  readonly name: string;
  readonly fields: readonly string[];
  readonly answerField: string;

  constructor(fields: readonly string[], opts: { answerField?: string } = {}) {
    super();
    if (fields.length === 0) throw new Error("XMLParser: at least one field is required");
    for (const f of fields) {
      if (!/^[A-Za-z_][\w-]*$/.test(f)) throw new Error(`XMLParser: invalid field name "${f}"`);
    }
    this.fields = fields;
    this.answerField = opts.answerField ?? fields[fields.length - 1]!;
    if (!fields.includes(this.answerField)) throw new Error(`XMLParser: answerField "${this.answerField}" is not one of ${fields.join(", ")}`);
    this.name = `xml(${fields.join(",")})`;
  }

  /** Every field's last value (trimmed), undefined when absent. */
  parseFields(text: string): Record<string, string | undefined> {
    const out: Record<string, string | undefined> = {};
    for (const f of this.fields) out[f] = lastField(text, f);
    return out;
  }

  parseText(text: string): ParseResult {
    const v = lastField(text, this.answerField);
    if (v === undefined) return { answer: null, reason: `no <${this.answerField}> field` };
    if (!v) return { answer: null, reason: `empty <${this.answerField}> field` };
    return { answer: v };
  }

  /** 1 when every field appears exactly once, closed, in the declared order, with nothing but whitespace around them. */
  formatScore(text: string): number {
    let rest = text.trim();
    for (const f of this.fields) {
      const open = `<${f}>`;
      const close = `</${f}>`;
      if (!rest.startsWith(open)) return 0;
      const end = rest.indexOf(close);
      const reopened = rest.indexOf(open, open.length);
      if (end < 0 || (reopened >= 0 && reopened < end)) return 0;
      rest = rest.slice(end + close.length).trimStart();
    }
    return rest === "" ? 1 : 0;
  }

  /** Render fields in declared order, e.g. for an SFT target. */
  format(values: Record<string, string>): string {
    return this.fields
      .filter((f) => values[f] !== undefined)
      .map((f) => `<${f}>${values[f]}</${f}>`)
      .join("\n");
  }
}

function lastField(text: string, field: string): string | undefined {
  const open = `<${field}>`;
  const close = `</${field}>`;
  const start = text.lastIndexOf(open);
  if (start < 0) return undefined;
  const from = start + open.length;
  const end = text.indexOf(close, from);
  return (end >= 0 ? text.slice(from, end) : text.slice(from)).trim();
}
