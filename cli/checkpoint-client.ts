// A ModelClient over one of our checkpoints, for `rollstream eval`. Accepts either an HF-style folder
// (config.json + model.safetensors, and tokenizer.json when it has its own tokenizer) or a run checkpoint
// folder (runs/<run>/checkpoints/step-N, whose run config sits two levels up as config.yaml).
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { PolicyModel } from "../kernels/index.js";
import { fromHfConfig } from "../kernels/hf-config.js";
import { loadTokenizer } from "../kernels/tokenizer.js";
import { loadRunConfig } from "../actors/runtime/config.js";
import { createPolicyModel, createTokenizer } from "../actors/runtime/model-factory.js";
import { PolicyEngine } from "../actors/runtime/policy-engine.js";
import { decodeTrainState } from "../kernels/train-state.js";
import { CheckpointDir } from "../actors/runtime/checkpoint-dir.js";
import type { ModelClient } from "../environments/api/index.js";
import { runConfigPathOf } from "./run-checkpoint.js";

export async function makeCheckpointClient(path: string, opts: { threads?: number; seed?: number } = {}): Promise<ModelClient> {
  const p = resolve(path);
  if (existsSync(join(p, "config.json")) && existsSync(join(p, "model.safetensors"))) {
    const cfg = fromHfConfig(JSON.parse(readFileSync(join(p, "config.json"), "utf8")));
    const model = PolicyModel.create(cfg, { threads: opts.threads });
    model.loadSafetensors(new Uint8Array(readFileSync(join(p, "model.safetensors"))));
    // The folder's own tokenizer when it has one (every Hub checkpoint does); else ours, for models from scratch.
    const tokenizer = existsSync(join(p, "tokenizer.json")) ? loadTokenizer({ kind: "hf", path: p }) : loadTokenizer({ kind: "byte" });
    if (tokenizer.vocabSize > cfg.vocabSize) {
      model.dispose();
      throw new Error(`${p}: the tokenizer has ${tokenizer.vocabSize} ids but the model only ${cfg.vocabSize} embedding rows`);
    }
    return new PolicyEngine(model, tokenizer, 0, { seed: opts.seed }).client(opts.seed);
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
    return new PolicyEngine(model, createTokenizer(config), counters.step, { seed: opts.seed }).client(opts.seed);
  }
  throw new Error(`${p} is neither an HF model folder (config.json + model.safetensors) nor a run checkpoint (manifest.json)`);
}
