// Packs samples into micro-batches: several sequences share one row of at most `microBatchTokens`
// tokens, with segment starts so no attention crosses a sequence boundary. Per-token arrays are indexed
// by the token being predicted (the kernels' convention).

export interface TrainSample {
  promptIds: ArrayLike<number>;
  completionIds: ArrayLike<number>;
  completionMask: ArrayLike<number>;
  samplerLogprobs: ArrayLike<number>;
  advantage: number;
}

export interface PackedMicroBatch {
  tokens: Int32Array;
  segmentStarts: Int32Array;
  lossMask: Uint8Array;
  advantages: Float32Array;
  samplerLogprobs: Float32Array;
}

export interface PackResult {
  microBatches: PackedMicroBatch[];
  lossTokens: number;
  totalTokens: number;
  /** Completion tokens cut because prompt + completion exceeded the context. */
  truncatedTokens: number;
}

export function packSamples(samples: TrainSample[], microBatchTokens: number, contextLength: number): PackResult {
  const groups: Array<{ idx: number; len: number }[]> = [];
  let current: { idx: number; len: number }[] = [];
  let used = 0;
  let truncatedTokens = 0;
  samples.forEach((s, idx) => {
    const full = s.promptIds.length + s.completionIds.length;
    const len = Math.min(full, contextLength);
    truncatedTokens += full - len;
    if (len < 2) return; // nothing to predict
    if (used + len > microBatchTokens && current.length > 0) {
      groups.push(current);
      current = [];
      used = 0;
    }
    current.push({ idx, len });
    used += len;
  });
  if (current.length > 0) groups.push(current);

  let lossTokens = 0;
  let totalTokens = 0;
  const microBatches = groups.map((g) => {
    const T = g.reduce((s, x) => s + x.len, 0);
    const mb: PackedMicroBatch = {
      tokens: new Int32Array(T),
      segmentStarts: new Int32Array(g.length),
      lossMask: new Uint8Array(T),
      advantages: new Float32Array(T),
      samplerLogprobs: new Float32Array(T),
    };
    let off = 0;
    g.forEach(({ idx, len }, si) => {
      const s = samples[idx]!;
      mb.segmentStarts[si] = off;
      const P = s.promptIds.length;
      for (let t = 0; t < len; t++) {
        const inPrompt = t < P;
        mb.tokens[off + t] = inPrompt ? s.promptIds[t]! : s.completionIds[t - P]!;
        if (!inPrompt && t > 0) {
          const j = t - P;
          const m = s.completionMask[j]! ? 1 : 0;
          mb.lossMask[off + t] = m;
          if (m) {
            mb.advantages[off + t] = s.advantage;
            mb.samplerLogprobs[off + t] = s.samplerLogprobs[j]!;
            lossTokens++;
          }
        }
      }
      off += len;
    });
    totalTokens += T;
    return mb;
  });
  return { microBatches, lossTokens, totalTokens, truncatedTokens };
}
