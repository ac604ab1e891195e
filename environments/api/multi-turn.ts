import { errorMessage, type DatasetRow } from "./dataset.js";
import type { ChatMessage } from "./messages.js";
import { type ReasoningMode, splitReasoning } from "./reasoning.js";
import type { Generation } from "./model.js";
import type { RolloutContext, RolloutResult } from "./rollout.js";
import { TokenTranscript } from "./transcript.js";
import { abortError, raceAbort, TimeLimitError } from "../util/time-limit.js";

export type RolloutState = Record<string, unknown>;

/** The environment's answer to a model turn. done = this is the final env message: stop after it. */
export interface EnvResponse {
  messages: ChatMessage[];
  done?: boolean;
}

export interface MultiTurnOptions {
  /** Called after every model turn that did not complete the rollout; may mutate state. */
  envResponse(
    messages: ChatMessage[],
    state: RolloutState,
    row: DatasetRow,
    ctx: RolloutContext,
  ): EnvResponse | ChatMessage[] | Promise<EnvResponse | ChatMessage[]>;
  /** Checked after each model turn (before envResponse): true ends the rollout with stopReason "completed". */
  isCompleted?(messages: ChatMessage[], state: RolloutState, row: DatasetRow): boolean | Promise<boolean>;
  /** Initial state for the rollout. */
  setupState?(row: DatasetRow, ctx: RolloutContext): RolloutState | Promise<RolloutState>;
  /** Most model turns. Default 10. */
  maxTurns?: number;
  /** Budget for the whole completion (model + env tokens). Default: unlimited. */
  maxCompletionTokens?: number;
  /** Wall-clock limit for the whole rollout. Default: none. */
  timeoutMs?: number;
  /** Overrides row.prompt (e.g. with instructions prepended). */
  prompt?: ChatMessage[];
  /** The chat template's `tools` variable, for templates that render tools (see TokenTranscript). */
  templateTools?: readonly Record<string, unknown>[];
  /**
   * What the result's assistant messages hold of a `<think>` block: "keep" (default) the text as written;
   * "strip" the reply after it, the reasoning in message.reasoning. The tokens always hold what was sampled,
   * and the hooks above always see the text as written.
   */
  reasoning?: ReasoningMode;
}

/**
 * Alternates model turns and env responses until a stop condition:
 *   completed   isCompleted returned true             env_done     envResponse returned done
 *   max_turns   maxTurns model turns                  length       a model turn hit sampling.maxTokens (truncated)
 *   token_budget maxCompletionTokens reached (trunc.)  context      the context window is full (truncated)
 *   timeout     timeoutMs passed (truncated)          env_error    envResponse / isCompleted threw (in state.errors)
 * The completion is one token sequence: model tokens mask 1, template and env tokens mask 0. A final
 * env message (done) goes into messages only: the model never saw it, so it is not in the tokens.
 * Aborting ctx.signal rejects; every other problem ends the rollout with a stop reason.
 */
export async function multiTurnRollout(ctx: RolloutContext, row: DatasetRow, opts: MultiTurnOptions): Promise<RolloutResult> {
  const maxTurns = opts.maxTurns ?? 10;
  const budget = opts.maxCompletionTokens ?? Number.POSITIVE_INFINITY;
  if (!(Number.isInteger(maxTurns) && maxTurns >= 1)) throw new Error(`multiTurnRollout: maxTurns must be an integer >= 1, got ${opts.maxTurns}`);
  if (!(budget > 0)) throw new Error(`multiTurnRollout: maxCompletionTokens must be > 0, got ${opts.maxCompletionTokens}`);

  // One signal for everything in this rollout: the runtime's abort or our own time limit.
  const ac = new AbortController();
  const onAbort = () => ac.abort(abortError(ctx.signal!));
  if (ctx.signal?.aborted) throw abortError(ctx.signal);
  ctx.signal?.addEventListener("abort", onAbort, { once: true });
  const timer = opts.timeoutMs !== undefined ? setTimeout(() => ac.abort(new TimeLimitError("rollout", opts.timeoutMs!)), opts.timeoutMs) : undefined;
  const signal = ac.signal;
  const innerCtx: RolloutContext = { ...ctx, signal };

  const timings = { generateMs: 0, envMs: 0 };
  const errors: string[] = [];
  let state: RolloutState = {};
  const t = new TokenTranscript(ctx.model.tokenizer, opts.prompt ?? row.prompt, opts.templateTools);

  const envStep = async <T>(what: string, fn: () => T | Promise<T>): Promise<{ ok: true; value: T } | { ok: false }> => {
    const t0 = performance.now();
    try {
      return { ok: true, value: await raceAbort(Promise.resolve().then(fn), signal) };
    } catch (err) {
      if (signal.aborted) throw err;
      errors.push(`${what}: ${errorMessage(err)}`);
      return { ok: false };
    } finally {
      timings.envMs += performance.now() - t0;
    }
  };

  const run = async (): Promise<{ stopReason: string; isTruncated: boolean }> => {
    if (opts.setupState) {
      const s = await envStep("setupState", () => opts.setupState!(row, innerCtx));
      if (!s.ok) return { stopReason: "env_error", isTruncated: false };
      state = s.value;
    }
    for (;;) {
      const remaining = budget - t.completionIds.length;
      if (remaining <= 0) return { stopReason: "token_budget", isTruncated: true };
      const turnMax = Math.min(ctx.sampling.maxTokens, remaining);
      const t0 = performance.now();
      let gen: Generation;
      try {
        gen = await raceAbort(ctx.model.generate(t.contextIds, { ...ctx.sampling, maxTokens: turnMax }, signal), signal);
      } finally {
        timings.generateMs += performance.now() - t0;
      }
      t.addModelTurn(gen);
      if (gen.stopReason === "context") return { stopReason: "context", isTruncated: true };
      if (gen.stopReason === "length") {
        return { stopReason: turnMax < ctx.sampling.maxTokens ? "token_budget" : "length", isTruncated: true };
      }
      if (opts.isCompleted) {
        const c = await envStep("isCompleted", () => opts.isCompleted!(t.messages, state, row));
        if (!c.ok) return { stopReason: "env_error", isTruncated: false };
        if (c.value) return { stopReason: "completed", isTruncated: false };
      }
      if (t.numTurns >= maxTurns) return { stopReason: "max_turns", isTruncated: false };
      const r = await envStep("envResponse", () => opts.envResponse(t.messages, state, row, innerCtx));
      if (!r.ok) return { stopReason: "env_error", isTruncated: false };
      const resp: EnvResponse = Array.isArray(r.value) ? { messages: r.value } : r.value;
      if (resp.done) {
        t.addUnseenMessages(resp.messages);
        return { stopReason: "env_done", isTruncated: false };
      }
      t.addEnvMessages(resp.messages);
      if (t.completionIds.length >= budget) return { stopReason: "token_budget", isTruncated: true };
    }
  };

  let end: { stopReason: string; isTruncated: boolean };
  try {
    end = await run();
  } catch (err) {
    // Our own time limit ends the rollout with what it has; the runtime's abort propagates.
    if (signal.aborted && signal.reason instanceof TimeLimitError && !ctx.signal?.aborted) end = { stopReason: "timeout", isTruncated: true };
    else throw err;
  } finally {
    if (timer) clearTimeout(timer);
    ctx.signal?.removeEventListener("abort", onAbort);
  }
  if (errors.length > 0) state = { ...state, errors: [...(Array.isArray(state["errors"]) ? (state["errors"] as unknown[]) : []), ...errors] };
  const result = t.toResult({ ...end, state, timings });
  if (opts.reasoning === "strip") result.messages = result.messages.map((m, i) => (i >= t.promptLength ? stripped(m) : m));
  return result;
}

function stripped(m: ChatMessage): ChatMessage {
  if (m.role !== "assistant") return m;
  const { reasoning, content } = splitReasoning(m.content);
  return reasoning === undefined ? m : { ...m, content, reasoning };
}
