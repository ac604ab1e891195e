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
});
