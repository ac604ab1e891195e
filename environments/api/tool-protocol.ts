import type { Tool } from "./tools.js";
import { toolJsonSchema } from "./tools.js";

/**
 * The textual tool-call protocol. A model calls a tool by writing, anywhere in its reply,
 *
 *     <tool>{"name": "calculator", "args": {"expression": "2+2"}}</tool>
 *
 * (several calls per reply are allowed and run in order). Each call is answered by one message with role
 * "tool" and name = the tool, whose content is the result, or a line starting with "error:" for a bad call
 * or a failing tool. A reply without "<tool>" is the model's final answer. Plain text tags keep the
 * protocol learnable by small models and independent of any vendor's function-calling format.
 */
export const TOOL_OPEN = "<tool>";
export const TOOL_CLOSE = "</tool>";

export type ParsedToolCall = { ok: true; name: string; args: unknown; raw: string } | { ok: false; error: string; raw: string };

/** True when a reply attempts at least one tool call. */
export function hasToolCall(text: string): boolean {
  return text.includes(TOOL_OPEN);
}

/** Every tool call in a reply, in order. An unclosed final call (cut generation) is still read. */
export function parseToolCalls(text: string): ParsedToolCall[] {
  const calls: ParsedToolCall[] = [];
  let at = text.indexOf(TOOL_OPEN);
  while (at >= 0) {
    const from = at + TOOL_OPEN.length;
    const end = text.indexOf(TOOL_CLOSE, from);
    const raw = (end >= 0 ? text.slice(from, end) : text.slice(from)).trim();
    calls.push(parseOne(raw));
    if (end < 0) break;
    at = text.indexOf(TOOL_OPEN, end + TOOL_CLOSE.length);
  }
  return calls;
}

/** One call's JSON object ({"name", "args" | "arguments"}), as every tool-call format writes it. */
export function parseOne(raw: string): ParsedToolCall {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch (err) {
    return { ok: false, raw, error: `tool call is not valid JSON (${(err as Error).message})` };
  }
  if (!v || typeof v !== "object" || Array.isArray(v)) return { ok: false, raw, error: "tool call must be a JSON object" };
  const o = v as Record<string, unknown>;
  if (typeof o["name"] !== "string" || !o["name"]) return { ok: false, raw, error: 'tool call needs a string "name"' };
  const args = o["args"] ?? o["arguments"] ?? {};
  return { ok: true, raw, name: o["name"], args };
}

/** Renders a call in the protocol (for SFT targets and scripted tests). */
export function formatToolCall(name: string, args: Record<string, unknown>): string {
  return `${TOOL_OPEN}${JSON.stringify({ name, args })}${TOOL_CLOSE}`;
}

/** Instructions that teach the protocol and list the tools with their argument schemas. */
export function toolInstructions(tools: readonly Tool[]): string {
  const lines = [
    "You can call tools. To call one, write:",
    `${TOOL_OPEN}{"name": "<tool name>", "args": {<arguments as JSON>}}${TOOL_CLOSE}`,
    "Each result comes back in a tool message. When you have the answer, reply without a tool call.",
    "Tools:",
  ];
  for (const t of tools) lines.push(`- ${t.name}: ${t.description} Arguments: ${JSON.stringify(toolJsonSchema(t))}`);
  return lines.join("\n");
}
