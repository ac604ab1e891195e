// A sharded Hugging Face checkpoint (model.safetensors.index.json and its shards, as save_pretrained writes a model
// past its shard size): loaded by a run's model.path, by `eval/serve --checkpoint`, by serve's weight route and by
// `model info`, with exactly the values of the same weights in one file; an index that names a missing shard, a
// tensor its shard lacks, a tensor it does not list or a path outside the folder is refused with its name.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadModelFolder } from "../../actors/runtime/model-folder.js";
import { toHfConfig } from "../../kernels/hf-config.js";
import { hfTensorShapes } from "../../kernels/hf-layout.js";
import { readHfWeights } from "../../kernels/hf-weights.js";
import type { ModelConfig } from "../../kernels/model-config.js";
import { describeModelFolder } from "../../kernels/model-info.js";
import { PolicyModel } from "../../kernels/index.js";
import { writeSafetensors, type TensorToWrite } from "../../kernels/safetensors.js";
import { folderWeights } from "../../serve/weight-loads.js";
import { tinyConfig } from "./helpers.js";

// The byte tokenizer (the folder has no tokenizer.json) has 288 ids: the model needs as many rows.
const cfg: ModelConfig = tinyConfig({ headDim: 6, qkNorm: true, tieWordEmbeddings: false, vocabSize: 288 });

function tensorsOf(c: ModelConfig, seed: number): TensorToWrite[] {
  let s = seed;
  const rand = () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32 - 0.5) * 0.2;
  return [...hfTensorShapes(c)].map(([name, shape]) => ({
    name,
    shape,
    data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, rand),
    dtype: "BF16" as const,
  }));
}

/** An HF folder with `tensors` in one file (shards 1) or split round-robin over `shards` files with an index. */
function writeFolder(dir: string, tensors: TensorToWrite[], shards: number, edit?: (index: { weight_map: Record<string, string> }) => void): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "config.json"), JSON.stringify({ ...toHfConfig(cfg), torch_dtype: "bfloat16" }));
  if (shards === 1) {
    writeFileSync(join(dir, "model.safetensors"), writeSafetensors(tensors));
    return dir;
  }
  const file = (i: number) => `model-${String(i + 1).padStart(5, "0")}-of-${String(shards).padStart(5, "0")}.safetensors`;
  const index = { metadata: { total_size: 0 }, weight_map: {} as Record<string, string> };
  for (let i = 0; i < shards; i++) {
    const part = tensors.filter((_, k) => k % shards === i);
    writeFileSync(join(dir, file(i)), writeSafetensors(part));
    for (const t of part) index.weight_map[t.name] = file(i);
    index.metadata.total_size += part.reduce((n, t) => n + t.data.length * 2, 0);
  }
  edit?.(index);
  writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify(index));
  return dir;
}

test("a sharded HF checkpoint loads the same values as one file, through every loader", async () => {
  const root = mkdtempSync(join(tmpdir(), "rs-sharded-"));
  try {
    const tensors = tensorsOf(cfg, 7);
    const single = loadModelFolder(writeFolder(join(root, "single"), tensors, 1), { threads: 1 });
    const shardedDir = writeFolder(join(root, "sharded"), tensors, 3);
    const sharded = loadModelFolder(shardedDir, { threads: 1 });
    assert.deepEqual(sharded.model.getParams(), single.model.getParams());
    // Control: other values in the shards give other parameters.
    const other = loadModelFolder(writeFolder(join(root, "other"), tensorsOf(cfg, 8), 3), { threads: 1 });
    assert.notDeepEqual(other.model.getParams(), single.model.getParams());

    const info = describeModelFolder(shardedDir);
    assert.deepEqual(info.problems, []);
    assert.match(new Map(info.facts).get("weights")!, /^3 shards \(model\.safetensors\.index\.json\): \d+ tensors, .* BF16 x\d+/);

    // serve's weight route reads a sharded folder as one safetensors file.
    const bytes = await (await folderWeights(shardedDir, cfg))();
    const viaServe = PolicyModel.create(cfg, { threads: 1 });
    viaServe.loadSafetensors(bytes);
    assert.deepEqual(viaServe.getParams(), single.model.getParams());
    for (const m of [single.model, sharded.model, other.model, viaServe]) m.dispose();
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("a broken shard index is refused with what is wrong", () => {
  const root = mkdtempSync(join(tmpdir(), "rs-sharded-bad-"));
  try {
    const tensors = tensorsOf(cfg, 7);
    const name = tensors[1]!.name;
    const cases: Array<[string, (i: { weight_map: Record<string, string> }) => void, RegExp]> = [
      ["missing-shard", (i) => (i.weight_map[name] = "model-00009-of-00009.safetensors"), /shard model-00009-of-00009\.safetensors \(holding ".*"\) is not in/],
      ["wrong-shard", (i) => (i.weight_map[name] = i.weight_map[tensors[0]!.name]!), new RegExp(`tensor "${name.replace(/\./g, "\\.")}" is not in this shard`)],
      ["unlisted", (i) => delete i.weight_map[name], new RegExp(`tensor "${name.replace(/\./g, "\\.")}" is not in model\\.safetensors\\.index\\.json`)],
      ["outside", (i) => (i.weight_map[name] = "../secret.safetensors"), /names shard "\.\.\/secret\.safetensors", not a file name in the folder/],
    ];
    for (const [label, edit, pattern] of cases) {
      const dir = writeFolder(join(root, label), tensors, 2, edit);
      assert.throws(() => readHfWeights(dir), pattern, label);
      assert.match(describeModelFolder(dir).problems.join("\n"), pattern, `model info: ${label}`);
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
