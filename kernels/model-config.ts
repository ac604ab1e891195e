// The policy model's shape, in our camelCase form. `hf-config.ts` maps it to and from HF config.json.
export interface ModelConfig {
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  /** head dim = hiddenSize / numHeads */
  rmsNormEps: number;
  ropeTheta: number;
  tieWordEmbeddings: boolean;
  maxPositionEmbeddings: number;
  /** Qwen2-style biases on q/k/v projections. */
  attentionBias: boolean;
}
