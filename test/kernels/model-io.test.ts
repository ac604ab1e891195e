// Safetensors save/load by HF name, and what the backend reports about itself.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel, backendInfo } from "../../kernels/index.js";
import { readSafetensors, writeSafetensors } from "../../kernels/safetensors.js";
import { tinyConfig } from "./helpers.js";

const cfg = tinyConfig({ attentionBias: true, tieWordEmbeddings: false });

test("toSafetensors / loadSafetensors round-trip every tensor by HF name", () => {
  const a = PolicyModel.create(cfg, { seed: 1 });
  const bytes = a.toSafetensors({ metadata: { format: "pt" } });
  const file = readSafetensors(bytes);
  assert.deepEqual(new Set(file.keys()), new Set(a.tensors().map((t) => t.name)));
  assert.deepEqual(file.get("model.layers.1.self_attn.k_proj.weight")!.shape, [8, 16]);
  const b = PolicyModel.create(cfg, { seed: 2 });
  b.loadSafetensors(bytes);
  assert.deepEqual(b.getParams(), a.getParams());
  // BF16 copy: values rounded to bf16, within 2^-8 relative.
  const c = PolicyModel.create(cfg, { seed: 3 });
  c.loadSafetensors(a.toSafetensors({ dtype: "BF16" }));
  const pa = a.getParams(),
    pc = c.getParams();
  for (let i = 0; i < pa.length; i++) assert.ok(Math.abs(pa[i] - pc[i]) <= Math.abs(pa[i]) / 256 + 1e-30);
  for (const m of [a, b, c]) m.dispose();
});

test("loadSafetensors names a missing tensor, a wrong shape, an unexpected tensor", () => {
  const m = PolicyModel.create(cfg, { seed: 1 });
  const tensors = [...readSafetensors(m.toSafetensors())].map(([name, t]) => ({ name, shape: t.shape, data: Float32Array.from(t.data) }));
  const without = tensors.filter((t) => t.name !== "model.layers.0.mlp.up_proj.weight");
  assert.throws(() => m.loadSafetensors(writeSafetensors(without)), /tensor "model.layers.0.mlp.up_proj.weight" is missing/);
  const reshaped = tensors.map((t) => (t.name === "model.norm.weight" ? { ...t, shape: [4, 4] } : t));
  assert.throws(() => m.loadSafetensors(writeSafetensors(reshaped)), /tensor "model.norm.weight" has shape \[4, 4\], the model needs \[16\]/);
  const extra = [...tensors, { name: "model.layers.0.self_attn.o_proj.bias", shape: [16], data: new Float32Array(16) }];
  assert.throws(() => m.loadSafetensors(writeSafetensors(extra)), /unexpected tensor "model.layers.0.self_attn.o_proj.bias"/);
  // RoPE caches some checkpoints carry are ignored.
  const withRope = [...tensors, { name: "model.layers.0.self_attn.rotary_emb.inv_freq", shape: [2], data: new Float32Array(2) }];
  m.loadSafetensors(writeSafetensors(withRope));
  m.dispose();
});

test("backendInfo reports the CPU backend, its SIMD level, thread count and BLAS", () => {
  const info = backendInfo("cpu");
  assert.equal(info.device, "cpu");
  assert.match(info.simd, /^avx2\+fma/);
  assert.ok(info.threads >= 1);
  assert.match(info.blas, /^(openblas|none)/);
  assert.match(info.path, /librollstream_cpu\.so$/);
  const auto = backendInfo();
  assert.ok(auto.device === "cpu" || auto.device === "cuda");
  const m = PolicyModel.create(cfg, { log: (line) => assert.match(line, /kernels: (cpu|cuda) backend/) });
  assert.equal(m.device, auto.device);
  m.dispose();
});
