// The policy model's shape, in our camelCase form. `hf-config.ts` maps it to and from HF config.json.
export interface ModelConfig {
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  /** Per-head width when it is not hiddenSize / numHeads (Qwen3 decouples it); absent = hiddenSize / numHeads. */
  headDim?: number;
  /** Qwen3: per-head RMSNorm of q and k (weights q_norm / k_norm of headDim) before RoPE; absent = false. */
  qkNorm?: boolean;
  rmsNormEps: number;
  ropeTheta: number;
  tieWordEmbeddings: boolean;
  maxPositionEmbeddings: number;
  /** Qwen2-style biases on q/k/v projections. */
  attentionBias: boolean;
}

/** The per-head width: headDim when set, else hiddenSize / numHeads. */
export function headDimOf(c: Pick<ModelConfig, "hiddenSize" | "numHeads" | "headDim">): number {
  return c.headDim ?? c.hiddenSize / c.numHeads;
}
