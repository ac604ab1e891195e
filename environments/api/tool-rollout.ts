import { errorMessage, type DatasetRow } from "./dataset.js";
import type { ChatMessage } from "./messages.js";
import { multiTurnRollout, type MultiTurnOptions, type RolloutState } from "./multi-turn.js";
import type { RolloutContext, RolloutResult } from "./rollout.js";
import { splitReasoning } from "./reasoning.js";
import { type ToolCallFormat, type ToolCallFormatSetting, toolCallFormat } from "./tool-call-format.js";
import type { Tool } from "./tools.js";
import { withTimeLimit } from "../util/time-limit.js";

export interface ToolRolloutOptions extends Pick<MultiTurnOptions, "maxTurns" | "maxCompletionTokens" | "timeoutMs" | "reasoning"> {
  tools: readonly Tool[];
  /** Time limit per tool call. Default 10 s. */
  toolTimeoutMs?: number;
  /** Most tool calls honoured per reply; extra ones are answered with an error. Default 4. */
  maxCallsPerTurn?: number;
  /** Prepend the protocol and tool list as a system message (merged into an existing one). Default true. */
  injectInstructions?: boolean;
  /** Overrides row.prompt. */
  prompt?: ChatMessage[];
  /** How calls are written (tool-call-format.ts). Default "auto": the chat template's format, else rollstream's. */
  format?: ToolCallFormatSetting;
}

/**
 * A multi-turn rollout where the env answers tool calls (in the format tool-call-format.ts picks, read from
 * the reply after any `<think>` block) and the rollout completes on the first reply without a tool call. Bad calls (invalid JSON, unknown tool, arguments that
 * fail the schema) and tool errors or timeouts go back to the model as "error: ..." tool messages.
 * state.toolCalls counts calls per tool, state.toolErrors failed calls; both also appear in
 * state.metrics ("tool_calls", "tool_calls.<name>", "tool_errors") and so in the score's metrics.
 */
export async function toolRollout(ctx: RolloutContext, row: DatasetRow, opts: ToolRolloutOptions): Promise<RolloutResult> {
  const byName = new Map<string, Tool>();
  for (const t of opts.tools) {
    if (byName.has(t.name)) throw new Error(`toolRollout: duplicate tool name "${t.name}"`);
    byName.set(t.name, t);
  }
  const toolTimeoutMs = opts.toolTimeoutMs ?? 10_000;
  const maxCalls = opts.maxCallsPerTurn ?? 4;
  const basePrompt = opts.prompt ?? row.prompt;
  const format = toolCallFormat(opts.format ?? "auto", ctx.model.tokenizer);
  const instructions = format.instructions(opts.tools);
  const prompt = opts.injectInstructions === false || instructions === null ? basePrompt : withInstructions(basePrompt, instructions);
  const callsIn = (messages: ChatMessage[]) => splitReasoning(messages[messages.length - 1]!.content).content;

  const counts = (state: RolloutState) => state["toolCalls"] as Record<string, number>;
  const updateMetrics = (state: RolloutState) => {
    const c = counts(state);
    const m: Record<string, number> = { tool_calls: 0, tool_errors: state["toolErrors"] as number };
    for (const [name, n] of Object.entries(c)) {
      m[`tool_calls.${name}`] = n;
      m["tool_calls"] += n;
    }
    state["metrics"] = { ...(state["metrics"] as object | undefined), ...m };
  };

  return multiTurnRollout(ctx, row, {
    maxTurns: opts.maxTurns,
    maxCompletionTokens: opts.maxCompletionTokens,
    timeoutMs: opts.timeoutMs,
    prompt,
    templateTools: format.templateTools(opts.tools),
    reasoning: opts.reasoning,
    setupState: () => {
      const state: RolloutState = { toolCalls: Object.fromEntries(opts.tools.map((t) => [t.name, 0])), toolErrors: 0 };
      updateMetrics(state);
      return state;
    },
    isCompleted: (messages) => !format.hasCall(callsIn(messages)),
    envResponse: async (messages, state, r, innerCtx) => {
      const calls = format.parse(callsIn(messages));
      const out: ChatMessage[] = [];
      for (const [i, call] of calls.entries()) {
        if (i >= maxCalls) {
          out.push(toolError("tool", `too many tool calls in one reply (at most ${maxCalls})`));
          state["toolErrors"] = (state["toolErrors"] as number) + 1;
          continue;
        }
        const reply = await runCall(call, byName, format, toolTimeoutMs, state, r, innerCtx);
        if (reply.counted) counts(state)[reply.message.name!] = (counts(state)[reply.message.name!] ?? 0) + 1;
        if (reply.failed) state["toolErrors"] = (state["toolErrors"] as number) + 1;
        out.push(reply.message);
      }
      updateMetrics(state);
      return out;
    },
  });
}

async function runCall(
  call: ReturnType<ToolCallFormat["parse"]>[number],
  tools: Map<string, Tool>,
  format: ToolCallFormat,
  timeoutMs: number,
  state: RolloutState,
  row: DatasetRow,
  ctx: RolloutContext,
): Promise<{ message: ChatMessage; counted: boolean; failed: boolean }> {
  if (!call.ok) {
    const example = format.name === "hermes" ? '<tool_call>{"name": "...", "arguments": {...}}</tool_call>' : '<tool>{"name": "...", "args": {...}}</tool>';
    return { message: toolError("tool", `${call.error}. Write ${example}`), counted: false, failed: true };
  }
  const tool = tools.get(call.name);
  if (!tool) {
    return { message: toolError(call.name, `unknown tool "${call.name}"; available: ${[...tools.keys()].join(", ")}`), counted: false, failed: true };
  }
  const args = tool.parameters.safeParse(call.args);
  if (!args.success) {
    const why = args.error.issues.map((i) => `${i.path.join(".") || "args"}: ${i.message}`).join("; ");
    return { message: toolError(tool.name, `invalid arguments for ${tool.name}: ${why}`), counted: true, failed: true };
  }
  try {
    const result = await withTimeLimit(
      timeoutMs,
      `tool ${tool.name}`,
      (signal) => tool.run(args.data, { sandbox: ctx.sandbox, signal, state, row }),
      ctx.signal,
    );
    const content = typeof result === "string" ? result : (JSON.stringify(result) ?? "null");
    return { message: { role: "tool", name: tool.name, content }, counted: true, failed: false };
  } catch (err) {
    if (ctx.signal?.aborted) throw err;
    return { message: toolError(tool.name, errorMessage(err)), counted: true, failed: true };
  }
}

function toolError(name: string, msg: string): ChatMessage {
  return { role: "tool", name, content: `error: ${msg}` };
}

function withInstructions(prompt: readonly ChatMessage[], instructions: string): ChatMessage[] {
  if (prompt[0]?.role === "system") {
    return [{ ...prompt[0], content: `${prompt[0].content}\n\n${instructions}` }, ...prompt.slice(1)];
  }
  return [{ role: "system", content: instructions }, ...prompt];
}
