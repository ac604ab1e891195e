// `rollstream model info`: the TS list of HF tensors (kernels/hf-layout.ts) equals the native layout; a Qwen3
// folder written here in HF's layout is recognised (architecture, shape, parameters, dtype, loads); folders
// that do not load say exactly which config key, tensor or file is the problem; the CLI exits 0 / 2 on them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PolicyModel } from "../../kernels/index.js";
import { fromHfConfig, toHfConfig } from "../../kernels/hf-config.js";
import { hfTensorShapes, parameterCount } from "../../kernels/hf-layout.js";
import type { ModelConfig } from "../../kernels/model-config.js";
import { describeModelFolder, formatModelInfo } from "../../kernels/model-info.js";
import { writeSafetensors } from "../../kernels/safetensors.js";
import { cliMain } from "../helpers/run-fixture.js";
import { tinyConfig } from "./helpers.js";

const qwen3: ModelConfig = tinyConfig({ headDim: 6, qkNorm: true, tieWordEmbeddings: false });

const qwen3Moe: ModelConfig = {
  ...qwen3,
  moe: { numExperts: 3, numExpertsPerTok: 2, moeIntermediateSize: 8, normTopkProb: false, routerAuxLossCoef: 0, decoderSparseStep: 2, mlpOnlyLayers: [] },
};

test("hfTensorShapes is the native layout's names and shapes, for llama, qwen2, qwen3 and qwen3_moe", () => {
  for (const cfg of [tinyConfig(), tinyConfig({ attentionBias: true, tieWordEmbeddings: false }), qwen3, qwen3Moe]) {
    const m = PolicyModel.create(cfg, { threads: 1 });
    assert.deepEqual(new Map(m.tensors().map((t) => [t.name, t.shape])), hfTensorShapes(cfg));
    assert.equal(parameterCount(cfg), m.numParams);
    m.dispose();
  }
});

/** A model folder: config.json as toHfConfig writes it (plus `extra` keys) and BF16 weights for `cfg`, minus `drop`. */
function folder(root: string, name: string, cfg: ModelConfig, opts: { extra?: Record<string, unknown>; drop?: string } = {}): string {
  const dir = join(root, name);
  mkdirSync(dir);
  writeFileSync(join(dir, "config.json"), JSON.stringify({ ...toHfConfig(cfg), torch_dtype: "bfloat16", ...opts.extra }));
  const tensors = [...hfTensorShapes(cfg)]
    .filter(([n]) => n !== opts.drop)
    .map(([n, shape]) => ({ name: n, shape, data: new Float32Array(shape.reduce((a, b) => a * b, 1)), dtype: "BF16" as const }));
  writeFileSync(join(dir, "model.safetensors"), writeSafetensors(tensors));
  return dir;
}

test("model info: a Qwen3 folder is recognised; unsupported keys, missing tensors and shards are named", () => {
  const root = mkdtempSync(join(tmpdir(), "rs-model-info-"));
  try {
    const good = describeModelFolder(folder(root, "qwen3", qwen3));
    const facts = new Map(good.facts);
    assert.deepEqual(good.problems, []);
    assert.equal(facts.get("architecture"), "qwen3 (Qwen3ForCausalLM)");
    assert.equal(facts.get("experts"), "none (dense)");
    assert.equal(facts.get("LoRA"), "none");
    assert.match(facts.get("shape")!, /^2 layers, hidden 16, 4 heads \/ 2 kv heads of 6, MLP 24, vocab 37$/);
    assert.match(facts.get("attention")!, /^q\/k RMSNorm, untied embeddings; RoPE theta 10000/);
    assert.equal(facts.get("parameters"), `${(parameterCount(qwen3) / 1e3).toFixed(1)}K`);
    assert.match(facts.get("weights")!, /BF16 x\d+ \(config says bfloat16\)$/);
    assert.match(formatModelInfo("x", good), /loads: yes/);

    const moeCfg: ModelConfig = {
      ...qwen3,
      moe: { numExperts: 8, numExpertsPerTok: 2, moeIntermediateSize: 8, normTopkProb: true, routerAuxLossCoef: 0, decoderSparseStep: 1, mlpOnlyLayers: [0] },
    };
    const moe = describeModelFolder(folder(root, "moe", moeCfg));
    assert.deepEqual(moe.problems, []);
    assert.equal(new Map(moe.facts).get("experts"), "8 routed, top-2");
    // Layer 0 dense, layer 1 sparse: 6 of its 8 experts (3 x 8 x 16 each) idle per token.
    const active = parameterCount(moeCfg) - 6 * 3 * 8 * 16;
    assert.equal(new Map(moe.facts).get("parameters"), `${(parameterCount(moeCfg) / 1e3).toFixed(1)}K, ${(active / 1e3).toFixed(1)}K active per token`);
    assert.equal(new Map(moe.facts).get("architecture"), "qwen3_moe (Qwen3MoeForCausalLM)");
    const glm = describeModelFolder(
      folder(root, "glm", qwen3, { extra: { model_type: "deepseek_v3", n_routed_experts: 8, n_shared_experts: 1, num_experts_per_tok: 2 } }),
    );
    assert.equal(new Map(glm.facts).get("experts"), "8 routed, top-2 + 1 shared");
    assert.match(glm.problems[0]!, /^config\.json is not supported: model_type: /);
    const yarn = describeModelFolder(folder(root, "yarn", qwen3, { extra: { rope_scaling: { rope_type: "yarn", factor: 4 } } }));
    assert.match(yarn.problems.join("\n"), /rope_scaling\.rope_type/);
    const missing = describeModelFolder(folder(root, "missing", qwen3, { drop: "model.layers.1.self_attn.k_norm.weight" }));
    assert.deepEqual(missing.problems, ['weights: tensor "model.layers.1.self_attn.k_norm.weight" is missing']);
    // The same weights under a config without q/k norms: the extra tensors are named.
    const llamaDir = folder(root, "llama-named", qwen3);
    writeFileSync(join(llamaDir, "config.json"), JSON.stringify(toHfConfig(tinyConfig({ tieWordEmbeddings: false }))));
    assert.match(
      describeModelFolder(llamaDir).problems.join("\n"),
      /tensor "model\.layers\.0\.self_attn\.q_proj\.weight" is \[24, 16\], the config needs \[16, 16\]/,
    );
    const sharded = join(root, "sharded");
    mkdirSync(sharded);
    writeFileSync(join(sharded, "config.json"), JSON.stringify(toHfConfig(qwen3)));
    writeFileSync(join(sharded, "model.safetensors.index.json"), "{}");
    assert.match(describeModelFolder(sharded).problems[0]!, /model\.safetensors\.index\.json: no "weight_map" object/);
    assert.equal(fromHfConfig(JSON.parse(JSON.stringify(toHfConfig(qwen3)))).headDim, 6);

    // The command: exit 0 with the report on stdout; exit 2 with the problems on stderr.
    const ok = spawnSync(process.execPath, [cliMain, "model", "info", join(root, "qwen3")], { encoding: "utf8", timeout: 60_000 });
    assert.equal(ok.status, 0, ok.stderr);
    assert.match(ok.stdout, /architecture +qwen3 \(Qwen3ForCausalLM\)/);
    const bad = spawnSync(process.execPath, [cliMain, "model", "info", join(root, "glm")], { encoding: "utf8", timeout: 60_000 });
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /loads: no \(1 problem\)\n +- config\.json is not supported: model_type/);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
