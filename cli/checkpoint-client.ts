// A ModelClient over one of our checkpoints, for `rollstream eval`: an HF-style folder or a run checkpoint
// folder (actors/runtime/model-folder.ts says which and loads it).
import { PolicyEngine } from "../actors/runtime/policy-engine.js";
import { loadModelFolder } from "../actors/runtime/model-folder.js";
import type { ModelClient } from "../environments/api/index.js";

export async function makeCheckpointClient(path: string, opts: { threads?: number; seed?: number } = {}): Promise<ModelClient> {
  const { model, tokenizer, version } = loadModelFolder(path, { threads: opts.threads });
  return new PolicyEngine(model, tokenizer, version, { seed: opts.seed }).client(opts.seed);
}
