// JSON views of decoded rows for the page: typed arrays become plain arrays, and the token view pairs each
// completion token with its text (when the tokenizer is known), its mask and the sampler's logprob.
import type { Tokenizer } from "../../kernels/tokenizer.js";
import type { RolloutRow } from "../../streams/index.js";

export interface TokenView {
  id: number;
  text: string | null;
  mask: number;
  logprob: number;
}

export function groupView(seq: number, rows: RolloutRow[], tokenizer?: Tokenizer) {
  return {
    seq,
    rows: rows.map((r) => ({
      taskId: r.taskId,
      env: r.env,
      exampleId: r.exampleId,
      step: r.step,
      policyVersionMin: r.policyVersionMin,
      policyVersionMax: r.policyVersionMax,
      reward: r.reward,
      advantage: r.advantage,
      rewardComponents: r.rewardComponents,
      metrics: r.metrics,
      stopReason: r.stopReason,
      isTruncated: r.isTruncated,
      numTurns: r.numTurns,
      errors: r.errors,
      messages: r.messages,
      promptTokens: r.promptIds.length,
      tokens: Array.from(
        r.completionIds,
        (id, i): TokenView => ({
          id,
          text: tokenizer ? tokenizer.decode([id]) : null,
          mask: r.completionMask[i] ?? 0,
          logprob: r.samplerLogprobs[i] ?? 0,
        }),
      ),
    })),
  };
}
