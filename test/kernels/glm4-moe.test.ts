// GLM-4-MoE (GLM-4.5-Air's architecture) on the CPU backend: a tiny random checkpoint in Hugging Face's layout
// (config.json keys as GLM-4.5-Air's, per-expert and shared-expert tensor names as its safetensors hold them,
// listed by hand, plus a multi-token-prediction layer the loader skips as transformers does): sigmoid routing with
// the correction bias and group-limited choice, routed_scaling_factor, a shared expert, the first layer dense,
// q/k/v biases, q/k norms, partial RoPE. Logits, loss and every tensor's gradient against the f64 reference;
// KV-cache generation against a full forward; save and reload bit-identical.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel } from "../../kernels/index.js";
import { fromHfConfig, toHfConfig } from "../../kernels/hf-config.js";
import { readSafetensors, writeSafetensors } from "../../kernels/safetensors.js";
import { forwardLogits, logSoftmaxRow, randomWeights, sftLoss } from "../reference/llama-f64.js";
import { assertClose, mulberry32, weightsOf } from "./helpers.js";

const V = 41,
  D = 16,
  I = 24,
  L = 3,
  H = 4,
  KV = 2,
  HD = 8,
  E = 8,
  K = 2,
  IM = 8;

/** GLM-4.5-Air's config.json keys, tiny values (2 groups of 4 experts, 1 kept; rotary half of each head). */
const glmJson = {
  architectures: ["Glm4MoeForCausalLM"],
  attention_bias: true,
  attention_dropout: 0.0,
  pad_token_id: 151329,
  eos_token_id: [151329, 151336, 151338],
  head_dim: HD,
  hidden_act: "silu",
  hidden_size: D,
  partial_rotary_factor: 0.5,
  initializer_range: 0.02,
  intermediate_size: I,
  max_position_embeddings: 131072,
  model_type: "glm4_moe",
  moe_intermediate_size: IM,
  norm_topk_prob: true,
  num_attention_heads: H,
  n_group: 2,
  topk_group: 1,
  n_routed_experts: E,
  n_shared_experts: 1,
  routed_scaling_factor: 2.5,
  num_experts_per_tok: K,
  first_k_dense_replace: 1,
  num_hidden_layers: L,
  num_key_value_heads: KV,
  rms_norm_eps: 1e-5,
  rope_scaling: null,
  rope_theta: 1000000,
  num_nextn_predict_layers: 1,
  tie_word_embeddings: false,
  torch_dtype: "bfloat16",
  transformers_version: "4.54.0",
  use_cache: true,
  use_qk_norm: true,
  vocab_size: V,
};

/** Glm4MoeForCausalLM's checkpoint names: layer 0 dense, layers 1-2 sparse (router, bias, shared expert, experts). */
function hfTensorShapes(): Map<string, number[]> {
  const s = new Map<string, number[]>([["model.embed_tokens.weight", [V, D]]]);
  for (let l = 0; l < L; l++) {
    const p = `model.layers.${l}`;
    for (const [n, shape] of [
      ["self_attn.q_proj.weight", [H * HD, D]],
      ["self_attn.q_proj.bias", [H * HD]],
      ["self_attn.k_proj.weight", [KV * HD, D]],
      ["self_attn.k_proj.bias", [KV * HD]],
      ["self_attn.v_proj.weight", [KV * HD, D]],
      ["self_attn.v_proj.bias", [KV * HD]],
      ["self_attn.o_proj.weight", [D, H * HD]],
      ["self_attn.q_norm.weight", [HD]],
      ["self_attn.k_norm.weight", [HD]],
      ["input_layernorm.weight", [D]],
      ["post_attention_layernorm.weight", [D]],
    ] as const)
      s.set(`${p}.${n}`, [...shape]);
    if (l === 0) {
      s.set(`${p}.mlp.gate_proj.weight`, [I, D]);
      s.set(`${p}.mlp.up_proj.weight`, [I, D]);
      s.set(`${p}.mlp.down_proj.weight`, [D, I]);
      continue;
    }
    s.set(`${p}.mlp.gate.weight`, [E, D]);
    s.set(`${p}.mlp.gate.e_score_correction_bias`, [E]);
    s.set(`${p}.mlp.shared_experts.gate_proj.weight`, [IM, D]);
    s.set(`${p}.mlp.shared_experts.up_proj.weight`, [IM, D]);
    s.set(`${p}.mlp.shared_experts.down_proj.weight`, [D, IM]);
    for (let e = 0; e < E; e++) {
      s.set(`${p}.mlp.experts.${e}.gate_proj.weight`, [IM, D]);
      s.set(`${p}.mlp.experts.${e}.up_proj.weight`, [IM, D]);
      s.set(`${p}.mlp.experts.${e}.down_proj.weight`, [D, IM]);
    }
  }
  s.set("model.norm.weight", [D]);
  s.set("lm_head.weight", [V, D]);
  return s;
}

function load(seed: number): PolicyModel {
  const cfg = fromHfConfig(glmJson);
  const ref = randomWeights(cfg, seed);
  const tensors = [...hfTensorShapes()].map(([name, shape]) => ({ name, shape, data: Float32Array.from(ref.get(name)!) }));
  // The MTP layer GLM-4.5-Air ships after its last layer: skipped on load.
  tensors.push({ name: `model.layers.${L}.eh_proj.weight`, shape: [D, 2 * D], data: new Float32Array(2 * D * D) });
  const m = PolicyModel.create(cfg, { seed: 1, threads: 2 });
  m.loadSafetensors(writeSafetensors(tensors));
  return m;
}

const tokens = Int32Array.from([5, 17, 3, 36, 0, 22, 9, 1, 30, 12, 7, 7, 19]);
const segmentStarts = Int32Array.from([0, 7]);
const lossMask = Uint8Array.from([0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1]);

test("glm4_moe config.json maps to sigmoid-routed experts, a shared expert, partial RoPE, and back", () => {
  const c = fromHfConfig(glmJson);
  assert.equal(c.headDim, HD);
  assert.equal(c.rotaryDim, HD / 2);
  assert.equal(c.attentionBias, true);
  assert.equal(c.qkNorm, true);
  assert.equal(c.ignoredCheckpointLayers, 1);
  assert.deepEqual(c.moe, {
    numExperts: E,
    numExpertsPerTok: K,
    moeIntermediateSize: IM,
    normTopkProb: true,
    routerAuxLossCoef: 0,
    decoderSparseStep: 1,
    mlpOnlyLayers: [0],
    sigmoid: { nGroup: 2, topkGroup: 1, routedScalingFactor: 2.5 },
    nSharedExperts: 1,
  });
  const back = toHfConfig(c);
  assert.equal(back.model_type, "glm4_moe");
  // What we write has no MTP layers (num_nextn_predict_layers 0): the rest round-trips.
  const { ignoredCheckpointLayers: _mtp, ...withoutMtp } = c;
  assert.deepEqual(fromHfConfig(JSON.parse(JSON.stringify(back))), withoutMtp);
  assert.throws(() => fromHfConfig({ ...glmJson, n_group: 3 }), /n_group: 3 groups of 8 experts/);
  assert.throws(() => fromHfConfig({ ...glmJson, partial_rotary_factor: 0.25, head_dim: 6 }), /partial_rotary_factor/);
  const m = PolicyModel.create(c, { threads: 1 });
  assert.deepEqual(new Map(m.tensors().map((t) => [t.name, t.shape])), hfTensorShapes());
  m.dispose();
});

test("glm4_moe: logits, loss and every tensor's gradient (router, shared expert, experts) match the f64 reference", async () => {
  const model = load(42);
  const cfg = model.config;
  const W = weightsOf(model);
  assertClose(await model.forward({ tokens, segmentStarts }), forwardLogits(cfg, W, tokens, segmentStarts), "logits", 1e-5);
  const normalizer = 9;
  const refLoss = () => {
    const z = forwardLogits(cfg, W, tokens, segmentStarts);
    const logprobs = Float64Array.from(tokens, (id, t) => (t === 0 || t === 7 ? NaN : logSoftmaxRow(z, (t - 1) * V, V)[id]!));
    return sftLoss({ logprobs, lossMask, normalizer });
  };
  const stats = await model.accumulate({ tokens, segmentStarts, lossMask }, { name: "sft" }, normalizer);
  assert.ok(Math.abs(stats.loss - refLoss()) < 1e-5 * Math.max(1, Math.abs(refLoss())), `loss ${stats.loss} vs ${refLoss()}`);
  const grads = model.getGrads();
  const rand = mulberry32(7);
  for (const e of model.tensors()) {
    const w = W.get(e.name)!;
    const scale = Math.max(...Array.from(grads.subarray(e.offset, e.offset + e.size), Math.abs));
    if (e.name.includes("shared_experts") || e.name.endsWith("mlp.gate.weight")) assert.ok(scale > 0, `${e.name}: no gradient`);
    if (e.name.endsWith("e_score_correction_bias")) assert.equal(scale, 0, "the correction bias is never trained");
    const idx = [...new Set(Array.from({ length: Math.min(e.size, 3) }, () => Math.floor(rand() * e.size)))];
    for (const i of idx) {
      const o = w[i]!;
      const h = 1e-5;
      w[i] = o + h;
      const a = refLoss();
      w[i] = o - h;
      const b = refLoss();
      w[i] = o;
      const num = (a - b) / (2 * h);
      const got = grads[e.offset + i]!;
      assert.ok(Math.abs(got - num) <= 2e-4 * scale + 1e-6, `${e.name}[${i}]: analytic ${got} vs numeric ${num} (scale ${scale})`);
    }
  }
  // Positive control: without partial RoPE (the whole head rotating) the reference disagrees.
  const whole = forwardLogits({ ...cfg, rotaryDim: undefined }, W, tokens, segmentStarts);
  const ours = await model.forward({ tokens, segmentStarts });
  assert.ok(ours.some((x, i) => Math.abs(x - whole[i]!) > 1e-3));
  model.dispose();
});

test("glm4_moe: KV-cache generation gives the logits of a full forward; save and reload are bit-identical", async () => {
  const model = load(5);
  const prompt = Int32Array.from([30, 31, 32, 33, 34, 35, 36, 0, 4]);
  const [r] = await model.generate({ prompts: [prompt], maxNewTokens: 8, temperature: 1, seed: 5, returnLogits: true });
  const logits = await model.forward({ tokens: Int32Array.from([...prompt, ...r!.tokens.subarray(0, 7)]), segmentStarts: Int32Array.of(0) });
  for (let k = 0; k < 8; k++) {
    assertClose(r!.stepLogits!.subarray(k * V, (k + 1) * V), logits.subarray((prompt.length - 1 + k) * V, (prompt.length + k) * V), `step ${k}`, 1e-5);
  }
  const saved = model.toSafetensors();
  assert.deepEqual(new Map([...readSafetensors(saved)].map(([n, t]) => [n, t.shape])), hfTensorShapes());
  const again = PolicyModel.create(model.config, { threads: 2 });
  again.loadSafetensors(saved);
  assert.deepEqual(again.getParams(), model.getParams());
  assert.deepEqual(again.toSafetensors(), saved);
  model.dispose();
  again.dispose();
});
