// Maps a Hugging Face config.json (LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM) to our ModelConfig
// and back. Anything that would change the math and that our kernels do not implement (rope scaling, o_proj or
// MLP biases, sliding-window attention, another activation, a head_dim that is not hidden/heads outside Qwen3)
// is rejected rather than ignored: silently loading such a checkpoint would produce a plausible-looking wrong model.
// Field names and defaults follow transformers' Qwen3Config (src/transformers/models/qwen3/configuration_qwen3.py
// at 008e5743): head_dim 128 when absent, q_norm/k_norm always present, attention_bias on q/k/v AND o_proj.
import { z } from "zod";
import { glmMoeOf, glmProblems, glmRotaryDim, hfGlmFields, hfGlmKeys, hfMoeFields, hfMoeKeys, moeConfigSchema, moeOf, moeProblems } from "./hf-config-moe.js";
import { headDimOf, type ModelConfig } from "./model-config.js";

export type HfModelType = "llama" | "qwen2" | "qwen3" | "qwen3_moe" | "glm4_moe";

const posInt = z.number().int().positive();

// HF's own defaults (transformers LlamaConfig / Qwen2Config) for fields a config.json may omit.
const HF_DEFAULTS: Record<HfModelType, { rmsNormEps: number; ropeTheta: number; tieWordEmbeddings: boolean; maxPositionEmbeddings: number }> = {
  llama: { rmsNormEps: 1e-6, ropeTheta: 10000, tieWordEmbeddings: false, maxPositionEmbeddings: 2048 },
  qwen2: { rmsNormEps: 1e-6, ropeTheta: 10000, tieWordEmbeddings: false, maxPositionEmbeddings: 32768 },
  qwen3: { rmsNormEps: 1e-6, ropeTheta: 10000, tieWordEmbeddings: false, maxPositionEmbeddings: 32768 },
  qwen3_moe: { rmsNormEps: 1e-6, ropeTheta: 10000, tieWordEmbeddings: false, maxPositionEmbeddings: 32768 },
  glm4_moe: { rmsNormEps: 1e-5, ropeTheta: 10000, tieWordEmbeddings: false, maxPositionEmbeddings: 131072 },
};
/** Qwen3Config.head_dim's default: a config.json without the key means 128, not hidden/heads. */
const QWEN3_HEAD_DIM = 128;

// Per-field checks; unknown keys (initializer_range, torch_dtype, token ids, ...) are allowed and ignored.
const hfConfigSchema = z.looseObject({
  model_type: z.enum(["llama", "qwen2", "qwen3", "qwen3_moe", "glm4_moe"]),
  vocab_size: posInt,
  hidden_size: posInt,
  intermediate_size: posInt,
  num_hidden_layers: posInt,
  num_attention_heads: posInt,
  num_key_value_heads: posInt.nullish(),
  head_dim: posInt.nullish(),
  rms_norm_eps: z.number().positive().finite().optional(),
  rope_theta: z.number().positive().finite().optional(),
  tie_word_embeddings: z.boolean().optional(),
  max_position_embeddings: posInt.optional(),
  attention_bias: z.boolean().optional(),
  mlp_bias: z.literal(false, { error: "MLP biases are not supported" }).optional(),
  hidden_act: z.literal("silu", { error: 'only hidden_act "silu" (SwiGLU) is supported' }).optional(),
  use_sliding_window: z.literal(false, { error: "sliding-window attention is not supported" }).optional(),
  // transformers >= 4.5x writes one entry per layer; only full attention is implemented.
  layer_types: z.array(z.literal("full_attention", { error: 'only "full_attention" layers are supported' })).nullish(),
  // transformers >= 4.5x writes {"rope_type": "default"} for plain RoPE; anything else rescales frequencies.
  rope_scaling: z
    .looseObject({ rope_type: z.literal("default").optional(), type: z.literal("default").optional() }, { error: "must be null or a default rope type" })
    .nullish(),
  rope_parameters: z
    .looseObject({
      rope_type: z.literal("default", { error: "only default RoPE is supported" }).optional(),
      rope_theta: z.number().positive().finite().optional(),
    })
    .nullish(),
  ...hfMoeFields,
  ...hfGlmFields,
});

type HfConfig = z.infer<typeof hfConfigSchema>;

function formatIssues(err: z.ZodError): string[] {
  return err.issues.map((i) => `${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`);
}

function isPosInt(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v) && v > 0;
}

/** Relations between fields, checked on the raw object so they are reported alongside per-field problems. */
function crossFieldProblems(raw: Record<string, unknown>): string[] {
  const problems: string[] = [];
  const { hidden_size: hidden, num_attention_heads: heads, head_dim: headDim, model_type: modelType } = raw;
  const kv = raw.num_key_value_heads ?? heads;
  if (modelType === "qwen3_moe") problems.push(...moeProblems(raw));
  if (modelType === "glm4_moe") {
    // GLM decouples head_dim too; its attention_bias is on q/k/v only (o_proj has none), like Qwen2's.
    const hd = isPosInt(headDim) ? headDim : isPosInt(hidden) && isPosInt(heads) ? hidden / heads : undefined;
    problems.push(...glmProblems(raw, hd));
    if (isPosInt(heads) && isPosInt(kv) && heads % kv !== 0) problems.push(`num_key_value_heads: num_attention_heads ${heads} is not divisible by ${kv}`);
    return problems;
  }
  if (modelType === "qwen3" || modelType === "qwen3_moe") {
    // Qwen3 decouples head_dim from hidden/heads; only RoPE's evenness constrains it.
    if (isPosInt(headDim) && headDim % 2 !== 0) problems.push(`head_dim: ${headDim} must be even for RoPE`);
    if (raw.attention_bias === true) problems.push("attention_bias: Qwen3 attention_bias (which includes an o_proj bias) is not supported");
  } else if (isPosInt(hidden) && isPosInt(heads)) {
    if (hidden % heads !== 0) problems.push(`hidden_size: ${hidden} is not divisible by num_attention_heads ${heads}`);
    else {
      const hd = hidden / heads;
      if (hd % 2 !== 0) problems.push(`hidden_size: head dim ${hidden}/${heads} = ${hd} must be even for RoPE`);
      if (isPosInt(headDim) && headDim !== hd) {
        problems.push(`head_dim: ${headDim} differs from hidden_size/num_attention_heads = ${hd}, which is not supported`);
      }
    }
  }
  if (isPosInt(heads) && isPosInt(kv) && heads % kv !== 0) {
    problems.push(`num_key_value_heads: num_attention_heads ${heads} is not divisible by ${kv}`);
  }
  // In HF Llama, attention_bias puts a bias on o_proj as well as q/k/v; we only model the Qwen2 q/k/v form.
  if (modelType === "llama" && raw.attention_bias === true) {
    problems.push("attention_bias: Llama attention_bias (which includes an o_proj bias) is not supported; Qwen2-style q/k/v bias is");
  }
  return problems;
}

function toModelConfig(hf: HfConfig): ModelConfig {
  const d = HF_DEFAULTS[hf.model_type];
  if (hf.model_type === "glm4_moe") return glmModelConfig(hf, d);
  // Qwen3MoeConfig has no head_dim default of its own: absent means hidden/heads there.
  const headDim = hf.head_dim ?? (hf.model_type === "qwen3" ? QWEN3_HEAD_DIM : hf.hidden_size / hf.num_attention_heads);
  const qwen3 = hf.model_type === "qwen3" || hf.model_type === "qwen3_moe" ? { headDim, qkNorm: true } : {};
  const moe = hf.model_type === "qwen3_moe" ? moeOf(hf) : undefined;
  return {
    ...sharedFields(hf, d),
    // Qwen2's modeling code always builds q/k/v with bias, whatever attention_bias says.
    attentionBias: hf.model_type === "qwen2",
    ...qwen3,
    ...(moe ? { moe } : {}),
  };
}

/** The fields every architecture reads the same way (with its own defaults). */
function sharedFields(hf: HfConfig, d: (typeof HF_DEFAULTS)[keyof typeof HF_DEFAULTS]) {
  return {
    vocabSize: hf.vocab_size,
    hiddenSize: hf.hidden_size,
    intermediateSize: hf.intermediate_size,
    numLayers: hf.num_hidden_layers,
    numHeads: hf.num_attention_heads,
    numKvHeads: hf.num_key_value_heads ?? hf.num_attention_heads,
    rmsNormEps: hf.rms_norm_eps ?? d.rmsNormEps,
    ropeTheta: hf.rope_theta ?? hf.rope_parameters?.rope_theta ?? d.ropeTheta,
    tieWordEmbeddings: hf.tie_word_embeddings ?? d.tieWordEmbeddings,
    maxPositionEmbeddings: hf.max_position_embeddings ?? d.maxPositionEmbeddings,
  };
}

function glmModelConfig(hf: HfConfig, d: (typeof HF_DEFAULTS)["glm4_moe"]): ModelConfig {
  const headDim = hf.head_dim ?? hf.hidden_size / hf.num_attention_heads;
  const rotaryDim = glmRotaryDim(hf, headDim);
  return {
    ...sharedFields(hf, d),
    attentionBias: hf.attention_bias ?? false,
    headDim,
    ...(hf.use_qk_norm ? { qkNorm: true } : {}),
    ...(rotaryDim !== headDim ? { rotaryDim } : {}),
    ...(hf.num_nextn_predict_layers ? { ignoredCheckpointLayers: hf.num_nextn_predict_layers } : {}),
    moe: glmMoeOf(hf),
  };
}

/** Parses a HF config.json object. Throws one Error listing every problem, each with its field path. */
export function fromHfConfig(json: unknown): ModelConfig {
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new Error("invalid HF config.json: expected a JSON object");
  }
  const parsed = hfConfigSchema.safeParse(json);
  const problems = [...(parsed.success ? [] : formatIssues(parsed.error)), ...crossFieldProblems(json as Record<string, unknown>)];
  if (problems.length > 0 || !parsed.success) {
    throw new Error(`invalid HF config.json:\n  - ${problems.join("\n  - ")}`);
  }
  return toModelConfig(parsed.data);
}

const modelConfigSchema = z
  .strictObject({
    vocabSize: posInt,
    hiddenSize: posInt,
    intermediateSize: posInt,
    numLayers: posInt,
    numHeads: posInt,
    numKvHeads: posInt,
    rmsNormEps: z.number().positive().finite(),
    ropeTheta: z.number().positive().finite(),
    tieWordEmbeddings: z.boolean(),
    maxPositionEmbeddings: posInt,
    attentionBias: z.boolean(),
    headDim: posInt.optional(),
    qkNorm: z.boolean().optional(),
    moe: moeConfigSchema.optional(),
    rotaryDim: posInt.optional(),
    ignoredCheckpointLayers: z.number().int().nonnegative().optional(),
  })
  .superRefine((c, ctx) => {
    if (c.headDim !== undefined) {
      if (c.headDim % 2 !== 0) ctx.addIssue({ code: "custom", path: ["headDim"], message: `${c.headDim} must be even for RoPE` });
    } else if (c.hiddenSize % c.numHeads !== 0) {
      ctx.addIssue({ code: "custom", path: ["hiddenSize"], message: `${c.hiddenSize} is not divisible by numHeads ${c.numHeads}` });
    } else if ((c.hiddenSize / c.numHeads) % 2 !== 0) {
      ctx.addIssue({ code: "custom", path: ["hiddenSize"], message: `head dim ${c.hiddenSize}/${c.numHeads} must be even for RoPE` });
    }
    if (c.numHeads % c.numKvHeads !== 0) {
      ctx.addIssue({ code: "custom", path: ["numKvHeads"], message: `numHeads ${c.numHeads} is not divisible by numKvHeads ${c.numKvHeads}` });
    }
    if (c.rotaryDim !== undefined && (c.rotaryDim % 2 !== 0 || c.rotaryDim > headDimOf(c))) {
      ctx.addIssue({ code: "custom", path: ["rotaryDim"], message: `${c.rotaryDim} must be even and at most the head dim ${headDimOf(c)}` });
    }
    if (c.moe && c.moe.numExpertsPerTok > c.moe.numExperts) {
      ctx.addIssue({ code: "custom", path: ["moe", "numExpertsPerTok"], message: `${c.moe.numExpertsPerTok} is more than numExperts ${c.moe.numExperts}` });
    }
  });

/** Checks a ModelConfig (e.g. from a run's YAML). Throws one Error listing every problem; returns it typed. */
export function validateModelConfig(cfg: unknown): ModelConfig {
  const r = modelConfigSchema.safeParse(cfg);
  if (!r.success) throw new Error(`invalid model config:\n  - ${formatIssues(r.error).join("\n  - ")}`);
  return r.data;
}

/**
 * A config.json that transformers loads as the same model. Default type: qwen2 when the config has q/k/v
 * biases (Llama cannot express them), else llama.
 */
export function toHfConfig(cfg: ModelConfig, modelType?: HfModelType): Record<string, unknown> {
  const c = validateModelConfig(cfg);
  const type = modelType ?? (c.moe?.sigmoid ? "glm4_moe" : c.moe ? "qwen3_moe" : c.qkNorm ? "qwen3" : c.attentionBias ? "qwen2" : "llama");
  if (type === "glm4_moe") return toGlmConfig(c);
  if (c.rotaryDim !== undefined || c.moe?.sigmoid) throw new Error(`toHfConfig: partial RoPE and sigmoid routing need glm4_moe, not ${type}`);
  const qwen = type === "qwen3" || type === "qwen3_moe";
  if (qwen && (!c.qkNorm || c.attentionBias)) throw new Error(`toHfConfig: ${type} always has q/k norms and no q/k/v-only biases`);
  if (!qwen && c.qkNorm) throw new Error(`toHfConfig: ${type} has no q/k norms; use qwen3`);
  if (!qwen && headDimOf(c) !== c.hiddenSize / c.numHeads) throw new Error(`toHfConfig: ${type} needs headDim = hiddenSize/numHeads; use qwen3`);
  if ((type === "qwen3_moe") !== (c.moe !== undefined)) throw new Error(`toHfConfig: experts need qwen3_moe, and qwen3_moe needs experts`);
  if (type === "llama" && c.attentionBias) throw new Error("toHfConfig: llama cannot express q/k/v-only attention biases; use qwen2");
  if (type === "qwen2" && !c.attentionBias) throw new Error("toHfConfig: qwen2 always has q/k/v biases but attentionBias is false; use llama");
  const common = {
    vocab_size: c.vocabSize,
    hidden_size: c.hiddenSize,
    intermediate_size: c.intermediateSize,
    num_hidden_layers: c.numLayers,
    num_attention_heads: c.numHeads,
    num_key_value_heads: c.numKvHeads,
    hidden_act: "silu",
    rms_norm_eps: c.rmsNormEps,
    rope_theta: c.ropeTheta,
    rope_scaling: null,
    tie_word_embeddings: c.tieWordEmbeddings,
    max_position_embeddings: c.maxPositionEmbeddings,
  };
  if (type === "qwen3") return { architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", ...common, ...qwen3Extras(c) };
  if (type === "qwen3_moe" && c.moe) {
    return { architectures: ["Qwen3MoeForCausalLM"], model_type: "qwen3_moe", ...common, ...qwen3Extras(c), ...hfMoeKeys(c.moe) };
  }
  if (type === "llama") {
    return {
      architectures: ["LlamaForCausalLM"],
      model_type: "llama",
      ...common,
      head_dim: c.hiddenSize / c.numHeads,
      attention_bias: false,
      mlp_bias: false,
    };
  }
  return {
    architectures: ["Qwen2ForCausalLM"],
    model_type: "qwen2",
    ...common,
    use_sliding_window: false,
    sliding_window: c.maxPositionEmbeddings,
    max_window_layers: c.numLayers,
  };
}

/** The keys transformers' Qwen3Config writes beyond the Llama-common ones (see the file header). */
function qwen3Extras(c: ModelConfig): Record<string, unknown> {
  return {
    head_dim: headDimOf(c),
    attention_bias: false,
    attention_dropout: 0,
    use_sliding_window: false,
    sliding_window: null,
    max_window_layers: c.numLayers,
  };
}

function toGlmConfig(c: ModelConfig): Record<string, unknown> {
  if (!c.moe?.sigmoid) throw new Error("toHfConfig: glm4_moe needs sigmoid-routed experts (moe.sigmoid)");
  const dense = c.moe.mlpOnlyLayers;
  if (c.moe.decoderSparseStep !== 1 || dense.some((l, i) => l !== i))
    throw new Error("toHfConfig: glm4_moe's dense layers must be the first k (first_k_dense_replace)");
  const hd = headDimOf(c);
  return {
    architectures: ["Glm4MoeForCausalLM"],
    model_type: "glm4_moe",
    vocab_size: c.vocabSize,
    hidden_size: c.hiddenSize,
    intermediate_size: c.intermediateSize,
    num_hidden_layers: c.numLayers,
    num_attention_heads: c.numHeads,
    num_key_value_heads: c.numKvHeads,
    head_dim: hd,
    hidden_act: "silu",
    rms_norm_eps: c.rmsNormEps,
    rope_theta: c.ropeTheta,
    rope_scaling: null,
    tie_word_embeddings: c.tieWordEmbeddings,
    max_position_embeddings: c.maxPositionEmbeddings,
    attention_bias: c.attentionBias,
    attention_dropout: 0,
    use_qk_norm: c.qkNorm ?? false,
    ...hfGlmKeys(c.moe, c.rotaryDim ?? hd, hd),
  };
}
