// Qwen3-MoE end to end on the CPU backend: a tiny random checkpoint written here in Hugging Face's layout
// (config.json keys as transformers' Qwen3MoeConfig writes them; per-expert tensor names as the Hub's
// Qwen3-30B-A3B safetensors hold them, listed by hand below), a dense layer among the sparse ones
// (mlp_only_layers), loaded through fromHfConfig + loadSafetensors; logits, loss (with the load-balancing loss
// when output_router_logits is set) and every tensor's gradient, router and experts included, against the f64
// reference; KV-cache generation against a full forward; save and reload bit-identical.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel } from "../../kernels/index.js";
import { fromHfConfig, toHfConfig } from "../../kernels/hf-config.js";
import { readSafetensors, writeSafetensors } from "../../kernels/safetensors.js";
import { forwardLogits, logSoftmaxRow, randomWeights, sftLoss } from "../reference/llama-f64.js";
import { loadBalancingLoss } from "../reference/moe-f64.js";
import { assertClose, mulberry32, weightsOf } from "./helpers.js";

const V = 41,
  D = 16,
  I = 24,
  L = 3,
  H = 4,
  KV = 2,
  HD = 6,
  E = 4,
  K = 2,
  IM = 8;

/** config.json as transformers writes a Qwen3MoeForCausalLM's (Qwen3-30B-A3B's keys, tiny values). */
function moeJson(opts: { norm: boolean; aux: boolean }): Record<string, unknown> {
  return {
    architectures: ["Qwen3MoeForCausalLM"],
    attention_bias: false,
    attention_dropout: 0.0,
    bos_token_id: 151643,
    decoder_sparse_step: 1,
    eos_token_id: 151645,
    head_dim: HD,
    hidden_act: "silu",
    hidden_size: D,
    initializer_range: 0.02,
    intermediate_size: I,
    max_position_embeddings: 40960,
    max_window_layers: 48,
    mlp_only_layers: [1],
    model_type: "qwen3_moe",
    moe_intermediate_size: IM,
    norm_topk_prob: opts.norm,
    num_attention_heads: H,
    num_experts: E,
    num_experts_per_tok: K,
    num_hidden_layers: L,
    num_key_value_heads: KV,
    output_router_logits: opts.aux,
    rms_norm_eps: 1e-6,
    rope_scaling: null,
    rope_theta: 1000000.0,
    router_aux_loss_coef: 0.05,
    sliding_window: null,
    tie_word_embeddings: false,
    torch_dtype: "bfloat16",
    transformers_version: "4.51.0",
    use_cache: true,
    use_sliding_window: false,
    vocab_size: V,
  };
}

/** Qwen3MoeForCausalLM's checkpoint names: layer 1 dense (mlp_only_layers), layers 0 and 2 sparse. */
function hfTensorShapes(): Map<string, number[]> {
  const s = new Map<string, number[]>([["model.embed_tokens.weight", [V, D]]]);
  for (let l = 0; l < L; l++) {
    const p = `model.layers.${l}`;
    for (const [n, shape] of [
      ["self_attn.q_proj.weight", [H * HD, D]],
      ["self_attn.k_proj.weight", [KV * HD, D]],
      ["self_attn.v_proj.weight", [KV * HD, D]],
      ["self_attn.o_proj.weight", [D, H * HD]],
      ["self_attn.q_norm.weight", [HD]],
      ["self_attn.k_norm.weight", [HD]],
      ["input_layernorm.weight", [D]],
      ["post_attention_layernorm.weight", [D]],
    ] as const)
      s.set(`${p}.${n}`, [...shape]);
    if (l === 1) {
      s.set(`${p}.mlp.gate_proj.weight`, [I, D]);
      s.set(`${p}.mlp.up_proj.weight`, [I, D]);
      s.set(`${p}.mlp.down_proj.weight`, [D, I]);
      continue;
    }
    s.set(`${p}.mlp.gate.weight`, [E, D]);
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

function load(opts: { norm: boolean; aux: boolean }, seed: number): PolicyModel {
  const cfg = fromHfConfig(moeJson(opts));
  const ref = randomWeights(cfg, seed);
  const tensors = [...hfTensorShapes()].map(([name, shape]) => ({ name, shape, data: Float32Array.from(ref.get(name)!), dtype: "BF16" as const }));
  const m = PolicyModel.create(cfg, { seed: 1, threads: 2 });
  m.loadSafetensors(writeSafetensors(tensors));
  return m;
}

const tokens = Int32Array.from([5, 17, 3, 36, 0, 22, 9, 1, 30, 12, 7, 7, 19]);
const segmentStarts = Int32Array.from([0, 7]);
const lossMask = Uint8Array.from([0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1]);

test("qwen3_moe config.json maps to the MoE block (HF defaults, mlp_only_layers, aux only with output_router_logits) and back", () => {
  const c = fromHfConfig(moeJson({ norm: true, aux: true }));
  assert.deepEqual(c.moe, {
    numExperts: E,
    numExpertsPerTok: K,
    moeIntermediateSize: IM,
    normTopkProb: true,
    routerAuxLossCoef: 0.05,
    decoderSparseStep: 1,
    mlpOnlyLayers: [1],
  });
  assert.equal(fromHfConfig(moeJson({ norm: false, aux: false })).moe?.routerAuxLossCoef, 0, "transformers adds the aux loss only with output_router_logits");
  assert.deepEqual(fromHfConfig(JSON.parse(JSON.stringify(toHfConfig(c)))), c);
  assert.equal(toHfConfig(c).model_type, "qwen3_moe");
  assert.equal(fromHfConfig({ ...moeJson({ norm: true, aux: false }), num_experts: 0 }).moe, undefined, "num_experts 0: every layer dense");
  assert.throws(() => fromHfConfig({ ...moeJson({ norm: true, aux: false }), num_experts_per_tok: 5 }), /num_experts_per_tok: 5 is more than num_experts 4/);
  assert.throws(() => fromHfConfig({ ...moeJson({ norm: true, aux: false }), mlp_only_layers: [3] }), /mlp_only_layers: layer 3 is past num_hidden_layers 3/);
  const m = PolicyModel.create(c, { threads: 1 });
  assert.deepEqual(new Map(m.tensors().map((t) => [t.name, t.shape])), hfTensorShapes());
  m.dispose();
});

for (const opts of [
  { norm: true, aux: true },
  { norm: false, aux: false },
]) {
  const label = `${opts.norm ? "norm_topk_prob" : "raw top-k probs"}${opts.aux ? " + load-balancing loss" : ""}`;
  test(`qwen3_moe (${label}): logits, loss and every tensor's gradient (router, experts) match the f64 reference`, async () => {
    const model = load(opts, 42);
    const cfg = model.config;
    const W = weightsOf(model);
    assertClose(await model.forward({ tokens, segmentStarts }), forwardLogits(cfg, W, tokens, segmentStarts), "logits", 1e-5);
    const normalizer = 9;
    const refLoss = () => {
      const probs: Float64Array[] = [];
      const z = forwardLogits(cfg, W, tokens, segmentStarts, { routerProbs: probs });
      // One forward for both terms (tokenLogprobs would run another): logprob of token t from row t - 1.
      const logprobs = Float64Array.from(tokens, (id, t) => (t === 0 || t === 7 ? NaN : logSoftmaxRow(z, (t - 1) * V, V)[id]!));
      const aux = cfg.moe!.routerAuxLossCoef * loadBalancingLoss(cfg, probs) * (10 / normalizer);
      return sftLoss({ logprobs, lossMask, normalizer }) + aux;
    };
    const stats = await model.accumulate({ tokens, segmentStarts, lossMask }, { name: "sft" }, normalizer);
    assert.ok(Math.abs(stats.loss - refLoss()) < 1e-5 * Math.max(1, Math.abs(refLoss())), `loss ${stats.loss} vs ${refLoss()}`);
    const grads = model.getGrads();
    const rand = mulberry32(7);
    let expertsTrained = 0;
    for (const e of model.tensors()) {
      const w = W.get(e.name)!;
      const scale = Math.max(...Array.from(grads.subarray(e.offset, e.offset + e.size), Math.abs));
      if (e.name.includes(".experts.") && scale > 0) expertsTrained++;
      const idx = [...new Set(Array.from({ length: Math.min(e.size, 4) }, () => Math.floor(rand() * e.size)))];
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
    assert.ok(expertsTrained >= 2 * K, `only ${expertsTrained} expert tensors received a gradient`);
    model.dispose();
  });
}

test("qwen3_moe: the load-balancing loss adds to the loss and moves the router (positive control)", async () => {
  const withAux = load({ norm: true, aux: true }, 42);
  const without = load({ norm: true, aux: false }, 42);
  const a = await withAux.accumulate({ tokens, segmentStarts, lossMask }, { name: "sft" }, 9);
  const b = await without.accumulate({ tokens, segmentStarts, lossMask }, { name: "sft" }, 9);
  assert.ok(a.loss - b.loss > 1e-3, `aux adds ${a.loss - b.loss}`);
  const router = withAux.tensors().find((t) => t.name === "model.layers.0.mlp.gate.weight")!;
  const ga = withAux.getGrads().subarray(router.offset, router.offset + router.size);
  const gb = without.getGrads().subarray(router.offset, router.offset + router.size);
  assert.ok(ga.some((x, i) => Math.abs(x - gb[i]!) > 1e-6));
  withAux.dispose();
  without.dispose();
});

test("qwen3_moe: KV-cache generation gives the logits of a full forward; save and reload are bit-identical", async () => {
  const model = load({ norm: true, aux: false }, 5);
  const prompt = Int32Array.from([30, 31, 32, 33, 34, 35, 36, 0, 4]);
  const [r] = await model.generate({ prompts: [prompt], maxNewTokens: 8, temperature: 1, seed: 5, returnLogits: true });
  const logits = await model.forward({ tokens: Int32Array.from([...prompt, ...r!.tokens.subarray(0, 7)]), segmentStarts: Int32Array.of(0) });
  for (let k = 0; k < 8; k++) {
    const row = logits.subarray((prompt.length - 1 + k) * V, (prompt.length + k) * V);
    assertClose(r!.stepLogits!.subarray(k * V, (k + 1) * V), row, `step ${k}`, 1e-5);
  }
  const saved = model.toSafetensors();
  assert.deepEqual(new Map([...readSafetensors(saved)].map(([n, t]) => [n, t.shape])), hfTensorShapes());
  const again = PolicyModel.create(model.config, { threads: 2 });
  again.loadSafetensors(saved);
  assert.deepEqual(again.getParams(), model.getParams());
  assert.deepEqual(again.toSafetensors(), saved);
  assert.deepEqual(await again.forward({ tokens, segmentStarts }), await model.forward({ tokens, segmentStarts }));
  model.dispose();
  again.dispose();
});
