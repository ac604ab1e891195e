// An overlong penalty (rl.lengthPenalty, DAPO's soft overlong punishment): a completion whose model tokens
// reach into the last `buffer` tokens of its budget loses reward linearly, down to -coef at the budget
// itself; shorter ones lose nothing. It shapes the reward the advantages are computed from (never the
// rubric reward the zero-variance filter judges, nor the row's recorded reward), and each row records its
// penalty as metric `length_penalty`, so replay recomputes the same advantages.
export interface LengthPenaltySettings {
  coef: number;
  buffer: number;
  /** The token budget of a completion: rl.sampling.maxTokens unless set. */
  maxTokens: number;
}

export const LENGTH_PENALTY_METRIC = "length_penalty";

/** The (non-positive) penalty of a completion with `tokens` model tokens. */
export function lengthPenalty(tokens: number, s: LengthPenaltySettings): number {
  if (s.coef === 0) return 0;
  const start = s.maxTokens - s.buffer;
  if (tokens <= start) return 0;
  return -s.coef * Math.min(1, (tokens - start) / Math.max(1, s.buffer));
}

/** Model tokens of a completion: those its mask trains on (environment tokens of a multi-turn transcript are not the model's). */
export function modelTokens(mask: ArrayLike<number>): number {
  let n = 0;
  for (let i = 0; i < mask.length; i++) n += mask[i] ? 1 : 0;
  return n;
}
