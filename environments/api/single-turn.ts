import type { DatasetRow } from "./dataset.js";
import type { ChatMessage } from "./messages.js";
import type { RolloutContext, RolloutResult } from "./rollout.js";
import { TokenTranscript } from "./transcript.js";

/** One model reply to the row's prompt. stopReason is the generation's (eos, stop, length, context). */
export async function singleTurnRollout(ctx: RolloutContext, row: DatasetRow, opts: { prompt?: ChatMessage[] } = {}): Promise<RolloutResult> {
  const t = new TokenTranscript(ctx.model.tokenizer, opts.prompt ?? row.prompt);
  const t0 = performance.now();
  const gen = await ctx.model.generate(t.contextIds, ctx.sampling, ctx.signal);
  const generateMs = performance.now() - t0;
  t.addModelTurn(gen);
  return t.toResult({
    stopReason: gen.stopReason,
    isTruncated: gen.stopReason === "length" || gen.stopReason === "context",
    state: {},
    timings: { generateMs, envMs: 0 },
  });
}
