// The HF tensor names and shapes a ModelConfig's checkpoint holds, computed without building the model (which
// would allocate params, grads and moments): what `rollstream model info` checks a folder's safetensors
// headers against. The native layout (kernels/shared/model_layout.h) is the one the model uses; a test keeps
// the two equal (test/kernels/model-info.test.ts).
import { headDimOf, type ModelConfig, moeLayerFlags } from "./model-config.js";

export function hfTensorShapes(cfg: ModelConfig): Map<string, number[]> {
  const { vocabSize: V, hiddenSize: D, intermediateSize: I, numHeads: H, numKvHeads: KV } = cfg;
  const hd = headDimOf(cfg);
  const sparse = moeLayerFlags(cfg);
  const s = new Map<string, number[]>([["model.embed_tokens.weight", [V, D]]]);
  for (let l = 0; l < cfg.numLayers; l++) {
    const p = `model.layers.${l}.`;
    s.set(`${p}input_layernorm.weight`, [D]);
    s.set(`${p}self_attn.q_proj.weight`, [H * hd, D]);
    s.set(`${p}self_attn.k_proj.weight`, [KV * hd, D]);
    s.set(`${p}self_attn.v_proj.weight`, [KV * hd, D]);
    if (cfg.attentionBias) {
      s.set(`${p}self_attn.q_proj.bias`, [H * hd]);
      s.set(`${p}self_attn.k_proj.bias`, [KV * hd]);
      s.set(`${p}self_attn.v_proj.bias`, [KV * hd]);
    }
    s.set(`${p}self_attn.o_proj.weight`, [D, H * hd]);
    if (cfg.qkNorm) {
      s.set(`${p}self_attn.q_norm.weight`, [hd]);
      s.set(`${p}self_attn.k_norm.weight`, [hd]);
    }
    s.set(`${p}post_attention_layernorm.weight`, [D]);
    if (sparse?.[l] && cfg.moe) {
      const { numExperts: E, moeIntermediateSize: Im } = cfg.moe;
      s.set(`${p}mlp.gate.weight`, [E, D]);
      if (cfg.moe.sigmoid) s.set(`${p}mlp.gate.e_score_correction_bias`, [E]);
      const Is = Im * (cfg.moe.nSharedExperts ?? 0);
      if (Is > 0) {
        s.set(`${p}mlp.shared_experts.gate_proj.weight`, [Is, D]);
        s.set(`${p}mlp.shared_experts.up_proj.weight`, [Is, D]);
        s.set(`${p}mlp.shared_experts.down_proj.weight`, [D, Is]);
      }
      for (let e = 0; e < E; e++) {
        s.set(`${p}mlp.experts.${e}.gate_proj.weight`, [Im, D]);
        s.set(`${p}mlp.experts.${e}.up_proj.weight`, [Im, D]);
        s.set(`${p}mlp.experts.${e}.down_proj.weight`, [D, Im]);
      }
      continue;
    }
    s.set(`${p}mlp.gate_proj.weight`, [I, D]);
    s.set(`${p}mlp.up_proj.weight`, [I, D]);
    s.set(`${p}mlp.down_proj.weight`, [D, I]);
  }
  s.set("model.norm.weight", [D]);
  if (!cfg.tieWordEmbeddings) s.set("lm_head.weight", [V, D]);
  return s;
}

/** Parameters of a config's checkpoint (tied embeddings counted once). */
export function parameterCount(cfg: ModelConfig): number {
  let n = 0;
  for (const shape of hfTensorShapes(cfg).values()) n += shape.reduce((a, b) => a * b, 1);
  return n;
}
