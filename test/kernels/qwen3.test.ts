// Qwen3 end to end on the CPU backend: a tiny random checkpoint written here in Hugging Face's exact layout
// (config.json keys as transformers' Qwen3Config writes them, safetensors names as Qwen3ForCausalLM names its
// parameters — listed by hand below, not taken from our layout code), loaded through fromHfConfig +
// loadSafetensors; logits and every tensor's gradient against the f64 reference (per-head q/k RMSNorm before
// RoPE, head_dim decoupled from hidden/heads); KV-cache generation against a full forward; save and reload
// bit-identical, in F32 and (exactly representable) BF16 / F16.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel } from "../../kernels/index.js";
import { fromHfConfig, toHfConfig } from "../../kernels/hf-config.js";
import { readSafetensors, writeSafetensors, type SafetensorsDtype } from "../../kernels/safetensors.js";
import { forwardLogits, randomWeights, sftLoss, tokenLogprobs, type Weights } from "../reference/llama-f64.js";
import { assertClose, mulberry32, weightsOf } from "./helpers.js";

const V = 41,
  D = 16,
  I = 24,
  L = 2,
  H = 4,
  KV = 2,
  HD = 6; // head_dim 6 != D/H = 4: the decoupling Qwen3 allows

/** config.json as transformers writes it for a Qwen3ForCausalLM (Qwen3-0.6B's keys, tiny values). */
function qwen3Json(tied: boolean): Record<string, unknown> {
  return {
    architectures: ["Qwen3ForCausalLM"],
    attention_bias: false,
    attention_dropout: 0.0,
    bos_token_id: 151643,
    eos_token_id: 151645,
    head_dim: HD,
    hidden_act: "silu",
    hidden_size: D,
    initializer_range: 0.02,
    intermediate_size: I,
    max_position_embeddings: 40960,
    max_window_layers: 28,
    model_type: "qwen3",
    num_attention_heads: H,
    num_hidden_layers: L,
    num_key_value_heads: KV,
    rms_norm_eps: 1e-6,
    rope_scaling: null,
    rope_theta: 1000000,
    sliding_window: null,
    tie_word_embeddings: tied,
    torch_dtype: "bfloat16",
    transformers_version: "4.51.0",
    use_cache: true,
    use_sliding_window: false,
    vocab_size: V,
  };
}

/** Qwen3ForCausalLM's state_dict names and shapes (modeling_qwen3.py: Qwen3Attention, Qwen3MLP, Qwen3DecoderLayer). */
function hfTensorShapes(tied: boolean): Map<string, number[]> {
  const s = new Map<string, number[]>([["model.embed_tokens.weight", [V, D]]]);
  for (let l = 0; l < L; l++) {
    const p = `model.layers.${l}`;
    s.set(`${p}.self_attn.q_proj.weight`, [H * HD, D]);
    s.set(`${p}.self_attn.k_proj.weight`, [KV * HD, D]);
    s.set(`${p}.self_attn.v_proj.weight`, [KV * HD, D]);
    s.set(`${p}.self_attn.o_proj.weight`, [D, H * HD]);
    s.set(`${p}.self_attn.q_norm.weight`, [HD]);
    s.set(`${p}.self_attn.k_norm.weight`, [HD]);
    s.set(`${p}.mlp.gate_proj.weight`, [I, D]);
    s.set(`${p}.mlp.up_proj.weight`, [I, D]);
    s.set(`${p}.mlp.down_proj.weight`, [D, I]);
    s.set(`${p}.input_layernorm.weight`, [D]);
    s.set(`${p}.post_attention_layernorm.weight`, [D]);
  }
  s.set("model.norm.weight", [D]);
  if (!tied) s.set("lm_head.weight", [V, D]);
  return s;
}

/** Random HF weights stored as `dtype`; `weights` holds the values the file holds (as read back). */
function checkpoint(tied: boolean, dtype: SafetensorsDtype, seed: number): { bytes: Uint8Array; weights: Weights } {
  const ref = randomWeights(fromHfConfig(qwen3Json(tied)), seed);
  const tensors = [...hfTensorShapes(tied)].map(([name, shape]) => {
    const w = ref.get(name);
    assert.ok(w, `the f64 reference has no ${name}`);
    return { name, shape, data: Float32Array.from(w), dtype };
  });
  const bytes = writeSafetensors(tensors);
  const file = readSafetensors(bytes);
  for (const t of tensors) assert.equal(file.get(t.name)?.dtype, dtype);
  return { bytes, weights: new Map([...file].map(([name, t]) => [name, Float64Array.from(t.data)])) };
}

function load(tied: boolean, bytes: Uint8Array): PolicyModel {
  const m = PolicyModel.create(fromHfConfig(qwen3Json(tied)), { seed: 1, threads: 2 });
  m.loadSafetensors(bytes);
  return m;
}

const tokens = Int32Array.from([5, 17, 3, 36, 0, 22, 9, 1, 30, 12, 7, 7, 19]);
const segmentStarts = Int32Array.from([0, 7]);
const lossMask = Uint8Array.from([0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1]);

test("qwen3 config.json maps to head_dim + q/k norm, HF defaults included, and back", () => {
  const c = fromHfConfig(qwen3Json(true));
  assert.equal(c.headDim, HD);
  assert.equal(c.qkNorm, true);
  assert.equal(c.attentionBias, false);
  assert.equal(c.ropeTheta, 1e6);
  const { head_dim: _h, ...noHeadDim } = qwen3Json(true);
  assert.equal(fromHfConfig({ ...noHeadDim, hidden_size: 1024, num_attention_heads: 16 }).headDim, 128, "Qwen3Config.head_dim defaults to 128");
  const back = toHfConfig(c);
  assert.equal(back.model_type, "qwen3");
  assert.deepEqual(back.architectures, ["Qwen3ForCausalLM"]);
  assert.deepEqual(fromHfConfig(JSON.parse(JSON.stringify(back))), c);
  assert.throws(() => fromHfConfig({ ...qwen3Json(true), attention_bias: true }), /attention_bias: Qwen3 attention_bias .* not supported/);
  assert.throws(() => fromHfConfig({ ...qwen3Json(true), head_dim: 7 }), /head_dim: 7 must be even/);
  assert.throws(() => fromHfConfig({ ...qwen3Json(true), layer_types: ["full_attention", "sliding_attention"] }), /layer_types\.1/);
  assert.throws(() => toHfConfig(c, "llama"), /llama has no q\/k norms/);
});

for (const tied of [true, false]) {
  const label = tied ? "tied" : "untied";
  test(`qwen3 (${label}): an HF-layout checkpoint loads; logits, loss and every tensor's gradient match the f64 reference`, async () => {
    const { bytes, weights } = checkpoint(tied, "F32", 42);
    const model = load(tied, bytes);
    const cfg = model.config;
    assert.deepEqual(new Set(model.tensors().map((t) => t.name)), new Set(hfTensorShapes(tied).keys()));
    const W = weightsOf(model);
    for (const [name, w] of weights) assert.deepEqual(W.get(name), w, `${name} loaded as written`);
    const logits = await model.forward({ tokens, segmentStarts });
    assertClose(logits, forwardLogits(cfg, W, tokens, segmentStarts), "logits", 1e-5);

    const normalizer = 9;
    const refLoss = () => sftLoss({ logprobs: tokenLogprobs(cfg, W, tokens, segmentStarts), lossMask, normalizer });
    const stats = await model.accumulate({ tokens, segmentStarts, lossMask }, { name: "sft" }, normalizer);
    assert.ok(Math.abs(stats.loss - refLoss()) < 1e-5 * Math.max(1, Math.abs(refLoss())), `loss ${stats.loss} vs ${refLoss()}`);
    const grads = model.getGrads();
    const rand = mulberry32(7);
    for (const e of model.tensors()) {
      const w = W.get(e.name)!;
      const idx = [...new Set(Array.from({ length: Math.min(e.size, 8) }, () => Math.floor(rand() * e.size)))];
      const scale = Math.max(...Array.from(grads.subarray(e.offset, e.offset + e.size), Math.abs));
      assert.ok(scale > 0, `${e.name}: zero gradient`);
      for (const i of idx) {
        const o = w[i];
        const h = 1e-5;
        w[i] = o + h;
        const a = refLoss();
        w[i] = o - h;
        const b = refLoss();
        w[i] = o;
        const num = (a - b) / (2 * h);
        const got = grads[e.offset + i];
        assert.ok(Math.abs(got - num) <= 2e-4 * scale + 1e-6, `${e.name}[${i}]: analytic ${got} vs numeric ${num} (scale ${scale})`);
      }
    }
    model.dispose();
  });
}

test("qwen3: the q/k norm weights change the logits (positive control for the reference comparison)", async () => {
  const { bytes } = checkpoint(true, "F32", 42);
  const model = load(true, bytes);
  const W = weightsOf(model);
  const before = forwardLogits(model.config, W, tokens, segmentStarts);
  W.get("model.layers.1.self_attn.k_norm.weight")!.fill(0.5);
  const after = forwardLogits(model.config, W, tokens, segmentStarts);
  assert.ok(before.some((x, i) => Math.abs(x - after[i]) > 1e-3));
  // Without the norm (a Llama of the same shapes), the reference disagrees with the native Qwen3 logits.
  const logits = await model.forward({ tokens, segmentStarts });
  const noNorm = forwardLogits({ ...model.config, qkNorm: false }, weightsOf(model), tokens, segmentStarts);
  assert.ok(logits.some((x, i) => Math.abs(x - noNorm[i]) > 1e-3));
  model.dispose();
});

test("qwen3: KV-cache generation (the step engine) gives the logits of a full forward", async () => {
  const { bytes } = checkpoint(false, "F32", 5);
  const model = load(false, bytes);
  const prompts = [Int32Array.from([1, 2, 3]), Int32Array.from([30, 31, 32, 33, 34, 35, 36, 0, 4])];
  const res = await model.generate({ prompts, maxNewTokens: 10, temperature: 1, seed: 5, returnLogits: true });
  for (let p = 0; p < prompts.length; p++) {
    const r = res[p];
    assert.equal(r.tokens.length, 10);
    const seq = Int32Array.from([...prompts[p], ...r.tokens.subarray(0, 9)]);
    const logits = await model.forward({ tokens: seq, segmentStarts: Int32Array.of(0) });
    for (let k = 0; k < 10; k++) {
      const row = logits.subarray((prompts[p].length - 1 + k) * V, (prompts[p].length + k) * V);
      assertClose(r.stepLogits!.subarray(k * V, (k + 1) * V), row, `prompt ${p} step ${k}`, 1e-5);
    }
  }
  model.dispose();
});

for (const dtype of ["F32", "BF16", "F16"] as const) {
  test(`qwen3: a ${dtype} checkpoint loads, saves and reloads bit-identically`, async () => {
    const { bytes, weights } = checkpoint(false, dtype, 9);
    const a = load(false, bytes);
    for (const [name, w] of weightsOf(a)) assert.deepEqual(w, weights.get(name), `${name} from ${dtype}`);
    const saved = a.toSafetensors();
    const b = load(false, saved);
    assert.deepEqual(b.getParams(), a.getParams());
    assert.deepEqual(b.toSafetensors(), saved, "a second save writes the same bytes");
    // The saved file carries exactly HF's names and shapes.
    const file = readSafetensors(saved);
    assert.deepEqual(new Map([...file].map(([n, t]) => [n, t.shape])), hfTensorShapes(false));
    const fa = await a.forward({ tokens, segmentStarts });
    assert.deepEqual(await b.forward({ tokens, segmentStarts }), fa);
    a.dispose();
    b.dispose();
  });
}
