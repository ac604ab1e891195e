// A model from a folder on disk, for the commands that serve or evaluate one outside a run (`rollstream eval
// --checkpoint`, `rollstream serve --checkpoint`): an HF-style folder (config.json + model.safetensors, and
// tokenizer.json when it has its own tokenizer; else the byte tokenizer of models trained from scratch), or a run
// checkpoint (runs/<run>/checkpoints/step-N with its manifest.json; the run config two levels up as config.yaml).
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { PolicyModel } from "../../kernels/index.js";
import { fromHfConfig } from "../../kernels/hf-config.js";
import { hasHfWeights, readHfWeights } from "../../kernels/hf-weights.js";
import type { ModelConfig } from "../../kernels/model-config.js";
import { loadTokenizer, type Tokenizer } from "../../kernels/tokenizer.js";
import { decodeTrainState } from "../../kernels/train-state.js";
import { CheckpointDir } from "./checkpoint-dir.js";
import { loadRunConfig, type RunConfig } from "./config.js";
import { createPolicyModel, createTokenizer, modelConfigOf } from "./model-factory.js";
import { runConfigPathOf } from "./run-checkpoint.js";

export interface FolderModel {
  model: PolicyModel;
  tokenizer: Tokenizer;
  modelConfig: ModelConfig;
  /** A run checkpoint's step (its policy version); 0 for an HF folder. */
  version: number;
  /** The run config of a run checkpoint. */
  runConfig?: RunConfig;
}

export function loadModelFolder(path: string, opts: { threads?: number } = {}): FolderModel {
  const p = resolve(path);
  if (existsSync(join(p, "config.json")) && hasHfWeights(p)) {
    const cfg = fromHfConfig(JSON.parse(readFileSync(join(p, "config.json"), "utf8")));
    // The folder's own tokenizer when it has one (every Hub checkpoint does); else ours, for models from scratch.
    const tokenizer = existsSync(join(p, "tokenizer.json")) ? loadTokenizer({ kind: "hf", path: p }) : loadTokenizer({ kind: "byte" });
    if (tokenizer.vocabSize > cfg.vocabSize)
      throw new Error(`${p}: the tokenizer has ${tokenizer.vocabSize} ids but the model only ${cfg.vocabSize} embedding rows`);
    const model = PolicyModel.create(cfg, { threads: opts.threads });
    model.loadTensors(readHfWeights(p));
    return { model, tokenizer, modelConfig: cfg, version: 0 };
  }
  const manifestPath = join(p, "manifest.json");
  if (existsSync(manifestPath)) {
    const configPath = runConfigPathOf(p);
    if (!existsSync(configPath)) throw new Error(`checkpoint ${p}: the run config ${configPath} is missing`);
    const config = loadRunConfig(configPath);
    const step = Number(JSON.parse(readFileSync(manifestPath, "utf8")).step);
    const { state } = new CheckpointDir(dirname(p), config.run).read(step);
    const model = createPolicyModel(config, { threads: opts.threads });
    const counters = decodeTrainState(model, state);
    return { model, tokenizer: createTokenizer(config), modelConfig: modelConfigOf(config), version: counters.step, runConfig: config };
  }
  throw new Error(`${p} is neither an HF model folder (config.json + model.safetensors or its shard index) nor a run checkpoint (manifest.json)`);
}
