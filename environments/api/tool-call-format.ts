import { formatHermesCall, hasHermesCall, hermesTemplateTools, parseHermesCalls } from "./hermes-tool-calls.js";
import type { TokenizerLike } from "./tokenizer.js";
import { formatToolCall, hasToolCall, type ParsedToolCall, parseToolCalls, toolInstructions } from "./tool-protocol.js";
import type { Tool } from "./tools.js";

/**
 * How a model writes tool calls, and how the tools reach it. "rollstream": our plain `<tool>{json}</tool>`
 * protocol taught by injected instructions (tool-protocol.ts; any tokenizer). "hermes": the
 * `<tool_call>{json}</tool_call>` format of Qwen2.5/Qwen3 chat templates, whose tools the template renders
 * itself (hermes-tool-calls.ts). "auto" picks what the tokenizer's chat template speaks, else rollstream.
 * Calls are parsed from the reply's content, after any `<think>` block (reasoning.ts).
 */
export type ToolCallFormatName = "rollstream" | "hermes";
export type ToolCallFormatSetting = ToolCallFormatName | "auto";

export interface ToolCallFormat {
  readonly name: ToolCallFormatName;
  hasCall(content: string): boolean;
  parse(content: string): ParsedToolCall[];
  format(name: string, args: Record<string, unknown>): string;
  /** System-prompt text that teaches the format and lists the tools; null when the template renders the tools. */
  instructions(tools: readonly Tool[]): string | null;
  /** The chat template's `tools` variable; undefined when the tools travel as instructions instead. */
  templateTools(tools: readonly Tool[]): Record<string, unknown>[] | undefined;
}

const rollstream: ToolCallFormat = {
  name: "rollstream",
  hasCall: hasToolCall,
  parse: parseToolCalls,
  format: formatToolCall,
  instructions: toolInstructions,
  templateTools: () => undefined,
};

const hermes: ToolCallFormat = {
  name: "hermes",
  hasCall: hasHermesCall,
  parse: parseHermesCalls,
  format: formatHermesCall,
  instructions: () => null,
  templateTools: hermesTemplateTools,
};

export function toolCallFormat(setting: ToolCallFormatSetting, tokenizer: TokenizerLike): ToolCallFormat {
  if (setting === "hermes") {
    if (tokenizer.toolCallFormat !== "hermes")
      throw new Error('tool format "hermes" needs a tokenizer whose chat template renders <tool_call> (Qwen2.5/Qwen3)');
    return hermes;
  }
  if (setting === "rollstream") return rollstream;
  return tokenizer.toolCallFormat === "hermes" ? hermes : rollstream;
}
