import { test } from "node:test";
import assert from "node:assert/strict";
import { fromHfConfig, toHfConfig, validateModelConfig } from "../../kernels/hf-config.js";
import type { ModelConfig } from "../../kernels/model-config.js";

// Shape of TinyLlama-1.1B's config.json (trimmed of irrelevant fields).
const llamaJson = {
  architectures: ["LlamaForCausalLM"],
  model_type: "llama",
  vocab_size: 32000,
  hidden_size: 2048,
  intermediate_size: 5632,
  num_hidden_layers: 22,
  num_attention_heads: 32,
  num_key_value_heads: 4,
  hidden_act: "silu",
  rms_norm_eps: 1e-5,
  rope_theta: 10000.0,
  rope_scaling: null,
  tie_word_embeddings: false,
  max_position_embeddings: 2048,
  attention_bias: false,
  torch_dtype: "bfloat16",
  bos_token_id: 1,
};

// Qwen2-0.5B's config.json.
const qwenJson = {
  architectures: ["Qwen2ForCausalLM"],
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151643,
  hidden_act: "silu",
  hidden_size: 896,
  initializer_range: 0.02,
  intermediate_size: 4864,
  max_position_embeddings: 131072,
  max_window_layers: 24,
  model_type: "qwen2",
  num_attention_heads: 14,
  num_hidden_layers: 24,
  num_key_value_heads: 2,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000.0,
  sliding_window: 131072,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936,
};

test("Llama config maps to ModelConfig", () => {
  assert.deepEqual(fromHfConfig(llamaJson), {
    vocabSize: 32000,
    hiddenSize: 2048,
    intermediateSize: 5632,
    numLayers: 22,
    numHeads: 32,
    numKvHeads: 4,
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
    tieWordEmbeddings: false,
    maxPositionEmbeddings: 2048,
    attentionBias: false,
  });
  // num_key_value_heads defaults to the head count; HF defaults fill omitted fields.
  const { num_key_value_heads: _kv, rms_norm_eps: _e, rope_theta: _t, tie_word_embeddings: _tw, max_position_embeddings: _m, ...minimal } = llamaJson;
  const c = fromHfConfig(minimal);
  assert.equal(c.numKvHeads, 32);
  assert.equal(c.rmsNormEps, 1e-6);
  assert.equal(c.ropeTheta, 10000);
  assert.equal(c.tieWordEmbeddings, false);
  assert.equal(c.maxPositionEmbeddings, 2048);
  assert.equal(fromHfConfig({ ...llamaJson, head_dim: 64, rope_scaling: { rope_type: "default" } }).hiddenSize, 2048);
  assert.equal(fromHfConfig({ ...minimal, rope_parameters: { rope_type: "default", rope_theta: 5e5 } }).ropeTheta, 5e5);
});

test("Qwen2-0.5B config maps to ModelConfig with q/k/v bias and tied embeddings", () => {
  assert.deepEqual(fromHfConfig(qwenJson), {
    vocabSize: 151936,
    hiddenSize: 896,
    intermediateSize: 4864,
    numLayers: 24,
    numHeads: 14,
    numKvHeads: 2,
    rmsNormEps: 1e-6,
    ropeTheta: 1e6,
    tieWordEmbeddings: true,
    maxPositionEmbeddings: 131072,
    attentionBias: true,
  });
});

test("toHfConfig round trips through fromHfConfig", () => {
  for (const json of [llamaJson, qwenJson]) {
    const cfg = fromHfConfig(json);
    const back = toHfConfig(cfg);
    assert.equal(back.model_type, json.model_type);
    assert.deepEqual(back.architectures, json.architectures);
    assert.deepEqual(fromHfConfig(JSON.parse(JSON.stringify(back))), cfg);
  }
  const llama = fromHfConfig(llamaJson);
  assert.throws(() => toHfConfig(llama, "qwen2"), /qwen2 always has q\/k\/v biases/);
  assert.throws(() => toHfConfig(fromHfConfig(qwenJson), "llama"), /llama cannot express/);
});

function problemsOf(json: unknown): string {
  try {
    fromHfConfig(json);
  } catch (e) {
    return (e as Error).message;
  }
  assert.fail("expected fromHfConfig to throw");
}

test("bad configs list every problem with its field path", () => {
  const msg = problemsOf({ ...llamaJson, hidden_size: 2050, num_key_value_heads: 5, vocab_size: -3, intermediate_size: "big", model_type: "gpt2" });
  assert.match(msg, /^invalid HF config\.json:/);
  assert.match(msg, /vocab_size:/);
  assert.match(msg, /intermediate_size:/);
  assert.match(msg, /model_type:/);
  assert.match(msg, /hidden_size: 2050 is not divisible by num_attention_heads 32/);
  assert.match(msg, /num_key_value_heads: num_attention_heads 32 is not divisible by 5/);

  assert.match(problemsOf({ ...llamaJson, head_dim: 128 }), /head_dim: 128 differs from hidden_size\/num_attention_heads = 64/);
  assert.match(problemsOf({ ...llamaJson, hidden_size: 96, num_attention_heads: 32, num_key_value_heads: 32 }), /head dim 96\/32 = 3 must be even/);
  assert.match(problemsOf({ ...llamaJson, attention_bias: true }), /attention_bias: Llama attention_bias .* not supported/);
  assert.match(problemsOf({ ...llamaJson, mlp_bias: true }), /mlp_bias: MLP biases are not supported/);
  assert.match(problemsOf({ ...llamaJson, hidden_act: "gelu" }), /hidden_act: only hidden_act "silu"/);
  assert.match(problemsOf({ ...llamaJson, rope_scaling: { rope_type: "llama3", factor: 8 } }), /rope_scaling\.rope_type/);
  assert.match(problemsOf({ ...qwenJson, use_sliding_window: true }), /use_sliding_window: sliding-window attention is not supported/);
  const { num_hidden_layers: _l, ...noLayers } = llamaJson;
  assert.match(problemsOf(noLayers), /num_hidden_layers:/);
  assert.match(problemsOf([1, 2]), /expected a JSON object/);
});

test("validateModelConfig", () => {
  const good: ModelConfig = fromHfConfig(llamaJson);
  assert.deepEqual(validateModelConfig(good), good);
  assert.throws(() => validateModelConfig({ ...good, hiddenSize: 100, numHeads: 3 }), /hiddenSize: 100 is not divisible by numHeads 3/);
  assert.throws(() => validateModelConfig({ ...good, hiddenSize: 96, numHeads: 32, numKvHeads: 32 }), /head dim 96\/32 must be even/);
  assert.throws(() => validateModelConfig({ ...good, numKvHeads: 3 }), /numKvHeads: numHeads 32 is not divisible by numKvHeads 3/);
  const msg = (() => {
    try {
      validateModelConfig({ ...good, numLayers: 0, vocabSize: 1.5, rmsNormEps: -1 });
    } catch (e) {
      return (e as Error).message;
    }
    return "";
  })();
  assert.match(msg, /numLayers:/);
  assert.match(msg, /vocabSize:/);
  assert.match(msg, /rmsNormEps:/);
  assert.throws(() => validateModelConfig({ ...good, numLayer: 2 }), /numLayer/);
});
