// The mixture-of-experts keys of a Qwen3-MoE config.json, read and written as transformers' Qwen3MoeConfig
// (src/transformers/models/qwen3_moe/configuration_qwen3_moe.py at 008e5743) names and defaults them. Like
// transformers, the load-balancing loss is part of the training loss only when output_router_logits is true.
import { z } from "zod";
import type { MoeConfig } from "./model-config.js";

const posInt = z.number().int().positive();

/** Per-field checks, merged into hf-config.ts's schema. */
export const hfMoeFields = {
  num_experts: z.number().int().nonnegative().optional(),
  num_experts_per_tok: posInt.optional(),
  moe_intermediate_size: posInt.optional(),
  norm_topk_prob: z.boolean().optional(),
  decoder_sparse_step: posInt.optional(),
  mlp_only_layers: z.array(z.number().int().nonnegative()).nullish(),
  router_aux_loss_coef: z.number().nonnegative().finite().optional(),
  output_router_logits: z.boolean().optional(),
};

type HfMoe = { [K in keyof typeof hfMoeFields]?: z.infer<(typeof hfMoeFields)[K]> };

const DEFAULTS = { numExperts: 128, numExpertsPerTok: 8, moeIntermediateSize: 768, decoderSparseStep: 1, routerAuxLossCoef: 0.001 };

/** The MoE block of a qwen3_moe config; undefined when num_experts is 0 (every layer dense, as in transformers). */
export function moeOf(hf: HfMoe): MoeConfig | undefined {
  const numExperts = hf.num_experts ?? DEFAULTS.numExperts;
  if (numExperts === 0) return undefined;
  return {
    numExperts,
    numExpertsPerTok: hf.num_experts_per_tok ?? DEFAULTS.numExpertsPerTok,
    moeIntermediateSize: hf.moe_intermediate_size ?? DEFAULTS.moeIntermediateSize,
    normTopkProb: hf.norm_topk_prob ?? false,
    routerAuxLossCoef: hf.output_router_logits ? (hf.router_aux_loss_coef ?? DEFAULTS.routerAuxLossCoef) : 0,
    decoderSparseStep: hf.decoder_sparse_step ?? DEFAULTS.decoderSparseStep,
    mlpOnlyLayers: [...(hf.mlp_only_layers ?? [])],
  };
}

/** Relations between the MoE fields. */
export function moeProblems(raw: Record<string, unknown>): string[] {
  const n = raw["num_experts"] ?? DEFAULTS.numExperts;
  const k = raw["num_experts_per_tok"] ?? DEFAULTS.numExpertsPerTok;
  const problems: string[] = [];
  if (typeof n === "number" && typeof k === "number" && n > 0 && k > n) problems.push(`num_experts_per_tok: ${k} is more than num_experts ${n}`);
  const layers = raw["num_hidden_layers"];
  const only = raw["mlp_only_layers"];
  if (typeof layers === "number" && Array.isArray(only)) {
    for (const l of only) if (typeof l === "number" && l >= layers) problems.push(`mlp_only_layers: layer ${l} is past num_hidden_layers ${layers}`);
  }
  return problems;
}

/** The keys Qwen3MoeConfig writes for the block. */
export function hfMoeKeys(m: MoeConfig): Record<string, unknown> {
  return {
    num_experts: m.numExperts,
    num_experts_per_tok: m.numExpertsPerTok,
    moe_intermediate_size: m.moeIntermediateSize,
    norm_topk_prob: m.normTopkProb,
    decoder_sparse_step: m.decoderSparseStep,
    mlp_only_layers: m.mlpOnlyLayers,
    output_router_logits: m.routerAuxLossCoef > 0,
    router_aux_loss_coef: m.routerAuxLossCoef > 0 ? m.routerAuxLossCoef : DEFAULTS.routerAuxLossCoef,
  };
}

export const moeConfigSchema = z.strictObject({
  numExperts: posInt,
  numExpertsPerTok: posInt,
  moeIntermediateSize: posInt,
  normTopkProb: z.boolean(),
  routerAuxLossCoef: z.number().nonnegative().finite(),
  decoderSparseStep: posInt,
  mlpOnlyLayers: z.array(z.number().int().nonnegative()),
  sigmoid: z.strictObject({ nGroup: posInt, topkGroup: posInt, routedScalingFactor: z.number().positive().finite() }).optional(),
  nSharedExperts: z.number().int().nonnegative().optional(),
});

// ------------------------------------------------------------------------------------------- GLM-4-MoE
// transformers' Glm4MoeConfig (models/glm4_moe/configuration_glm4_moe.py) and Glm4MoeMoE
// (modeling_glm4_moe.py at 000c33fd): layers >= first_k_dense_replace are sparse, DeepSeek-V3 sigmoid routing.

export const hfGlmFields = {
  n_routed_experts: posInt.optional(),
  n_shared_experts: z.number().int().nonnegative().optional(),
  first_k_dense_replace: z.number().int().nonnegative().optional(),
  n_group: posInt.optional(),
  topk_group: posInt.optional(),
  routed_scaling_factor: z.number().positive().finite().optional(),
  partial_rotary_factor: z.number().gt(0).max(1).optional(),
  use_qk_norm: z.boolean().optional(),
  // Multi-token-prediction layers the checkpoint holds after the last layer (model.layers.<L>...): not part of the
  // causal LM; transformers skips them on load, and so do we (ModelConfig.ignoredCheckpointLayers).
  num_nextn_predict_layers: z.number().int().nonnegative().optional(),
};

type HfGlm = { [K in keyof typeof hfGlmFields]?: z.infer<(typeof hfGlmFields)[K]> } & HfMoe & { num_hidden_layers: number };

const GLM = { nRouted: 128, nShared: 1, topK: 8, moeI: 1408, firstDense: 1, partialRotary: 0.5 };

export function glmMoeOf(hf: HfGlm): MoeConfig {
  const dense = Math.min(hf.first_k_dense_replace ?? GLM.firstDense, hf.num_hidden_layers);
  return {
    numExperts: hf.n_routed_experts ?? GLM.nRouted,
    numExpertsPerTok: hf.num_experts_per_tok ?? GLM.topK,
    moeIntermediateSize: hf.moe_intermediate_size ?? GLM.moeI,
    normTopkProb: hf.norm_topk_prob ?? true,
    routerAuxLossCoef: 0,
    decoderSparseStep: 1,
    mlpOnlyLayers: Array.from({ length: dense }, (_, l) => l),
    sigmoid: { nGroup: hf.n_group ?? 1, topkGroup: hf.topk_group ?? 1, routedScalingFactor: hf.routed_scaling_factor ?? 1 },
    nSharedExperts: hf.n_shared_experts ?? GLM.nShared,
  };
}

/** RoPE's rotary width: int(head_dim * partial_rotary_factor), as Glm4MoeRotaryEmbedding computes it. */
export function glmRotaryDim(hf: { partial_rotary_factor?: number }, headDim: number): number {
  return Math.floor(headDim * (hf.partial_rotary_factor ?? GLM.partialRotary));
}

export function glmProblems(raw: Record<string, unknown>, headDim: number | undefined): string[] {
  const problems: string[] = [];
  const n = (raw["n_routed_experts"] as number | undefined) ?? GLM.nRouted;
  const g = (raw["n_group"] as number | undefined) ?? 1;
  const tg = (raw["topk_group"] as number | undefined) ?? 1;
  if (typeof n === "number" && typeof g === "number" && (n % g !== 0 || n / g < 2))
    problems.push(`n_group: ${g} groups of ${n} experts (each needs 2 or more)`);
  if (typeof tg === "number" && typeof g === "number" && tg > g) problems.push(`topk_group: ${tg} is more than n_group ${g}`);
  const k = (raw["num_experts_per_tok"] as number | undefined) ?? GLM.topK;
  if (typeof k === "number" && typeof n === "number" && k > n) problems.push(`num_experts_per_tok: ${k} is more than n_routed_experts ${n}`);
  if (headDim !== undefined && glmRotaryDim(raw as { partial_rotary_factor?: number }, headDim) % 2 !== 0) {
    problems.push(`partial_rotary_factor: head_dim ${headDim} x ${String(raw["partial_rotary_factor"] ?? GLM.partialRotary)} must give an even rotary width`);
  }
  return problems;
}

export function hfGlmKeys(m: MoeConfig, rotaryDim: number, headDim: number): Record<string, unknown> {
  return {
    n_routed_experts: m.numExperts,
    n_shared_experts: m.nSharedExperts ?? 0,
    num_experts_per_tok: m.numExpertsPerTok,
    moe_intermediate_size: m.moeIntermediateSize,
    first_k_dense_replace: m.mlpOnlyLayers.length,
    n_group: m.sigmoid?.nGroup ?? 1,
    topk_group: m.sigmoid?.topkGroup ?? 1,
    routed_scaling_factor: m.sigmoid?.routedScalingFactor ?? 1,
    norm_topk_prob: m.normTopkProb,
    partial_rotary_factor: rotaryDim / headDim,
    num_nextn_predict_layers: 0,
  };
}
