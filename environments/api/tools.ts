import { z } from "zod";
import type { DatasetRow } from "./dataset.js";
import type { CodeSandbox } from "./sandbox.js";

export interface ToolContext {
  sandbox?: CodeSandbox;
  /** Fires at the tool's time limit or when the rollout is aborted. */
  signal: AbortSignal;
  /** The rollout's state (tools may keep per-rollout data here). */
  state: Record<string, unknown>;
  row: DatasetRow;
}

/**
 * A tool the model may call: a typed TS function whose arguments are validated by a zod schema (also
 * rendered as JSON schema in the tool instructions). The result is sent back as text (JSON for non-strings).
 */
export interface Tool<S extends z.ZodType = z.ZodType> {
  readonly name: string;
  readonly description: string;
  readonly parameters: S;
  run(args: z.output<S>, ctx: ToolContext): unknown;
}

/** Declares a tool; the identity function that gives `run` its argument type from the schema. */
export function defineTool<S extends z.ZodType>(tool: Tool<S>): Tool<S> {
  if (!/^[A-Za-z_][\w-]*$/.test(tool.name)) throw new Error(`defineTool: invalid tool name "${tool.name}"`);
  return tool;
}

/** The JSON schema of a tool's arguments. */
export function toolJsonSchema(tool: Tool): Record<string, unknown> {
  const s = z.toJSONSchema(tool.parameters, { unrepresentable: "any" }) as Record<string, unknown>;
  delete s["$schema"];
  return s;
}
