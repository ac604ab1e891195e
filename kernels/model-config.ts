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
  /** Mixture-of-experts MLPs (Qwen3-MoE, GLM-4-MoE); absent = dense. */
  moe?: MoeConfig;
  /** RoPE on the first rotaryDim dims of each head (GLM's partial_rotary_factor); absent = the whole head. */
  rotaryDim?: number;
  /** Layers a checkpoint holds past numLayers that the model does not use (GLM's multi-token-prediction layers):
   *  their tensors are skipped on load, as transformers skips them. */
  ignoredCheckpointLayers?: number;
  rmsNormEps: number;
  ropeTheta: number;
  tieWordEmbeddings: boolean;
  maxPositionEmbeddings: number;
  /** Qwen2-style biases on q/k/v projections. */
  attentionBias: boolean;
}

/** Qwen3-MoE's sparse block, in transformers' Qwen3MoeConfig terms (see kernels.h rs_model_config). */
export interface MoeConfig {
  numExperts: number;
  numExpertsPerTok: number;
  moeIntermediateSize: number;
  normTopkProb: boolean;
  /** Load-balancing loss coefficient; 0 = none. */
  routerAuxLossCoef: number;
  /** Layer l is sparse when l is not in mlpOnlyLayers and (l + 1) % decoderSparseStep == 0 (Qwen3MoeDecoderLayer). */
  decoderSparseStep: number;
  mlpOnlyLayers: number[];
  /** GLM-4-MoE's sigmoid routing with groups and a correction bias (kernels.h rs_model_config.moe_router); absent = softmax. */
  sigmoid?: { nGroup: number; topkGroup: number; routedScalingFactor: number };
  /** Shared experts on every token (width moeIntermediateSize * n); absent = none. */
  nSharedExperts?: number;
}

/** Per layer: 1 = sparse MoE block, 0 = dense MLP; null for a dense model. */
export function moeLayerFlags(c: Pick<ModelConfig, "numLayers" | "moe">): Uint8Array | null {
  const m = c.moe;
  if (!m) return null;
  return Uint8Array.from({ length: c.numLayers }, (_, l) => (!m.mlpOnlyLayers.includes(l) && (l + 1) % m.decoderSparseStep === 0 ? 1 : 0));
}

/** The per-head width: headDim when set, else hiddenSize / numHeads. */
export function headDimOf(c: Pick<ModelConfig, "hiddenSize" | "numHeads" | "headDim">): number {
  return c.headDim ?? c.hiddenSize / c.numHeads;
}
