// A tiny model behind `rollstream serve`'s engine, for the serve tests: the byte tokenizer, a 2-layer model with
// random weights (seeded), a PolicyEngine over it, and what the same model gives a request alone (the positive
// control: the server must answer exactly that).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PolicyModel } from "../../kernels/index.js";
import { toHfConfig } from "../../kernels/hf-config.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { PolicyEngine } from "../../actors/runtime/policy-engine.js";
import { PolicyTokenEngine } from "../../serve/policy-token-engine.js";

export const tok = new ByteTokenizer();
export const tinyConfig = {
  vocabSize: 288,
  hiddenSize: 32,
  intermediateSize: 64,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  maxPositionEmbeddings: 256,
  rmsNormEps: 1e-5,
  ropeTheta: 10000,
  tieWordEmbeddings: true,
  attentionBias: false,
};

export function tinyModel(seed = 1): PolicyModel {
  return PolicyModel.create(tinyConfig, { seed, threads: 1, device: "cpu" });
}

export function tinyEngine(seed = 1, label = "0"): { model: PolicyModel; policy: PolicyEngine; engine: PolicyTokenEngine } {
  const model = tinyModel(seed);
  const policy = new PolicyEngine(model, tok, 0, { seed: 5 });
  const engine = new PolicyTokenEngine(policy, { vocabSize: tok.vocabSize, contextTokens: tinyConfig.maxPositionEmbeddings, label, source: "test" });
  return { model, policy, engine };
}

/** The model's answer to one request alone (the batch API: its own loop over the step engine). */
export async function alone(
  m: PolicyModel,
  prompt: number[],
  o: { maxTokens: number; seed: number; temperature?: number; topP?: number; topK?: number; stops?: number[] },
) {
  const [r] = await m.generate({
    prompts: [Int32Array.from(prompt)],
    seeds: [o.seed],
    maxNewTokens: o.maxTokens,
    temperature: o.temperature ?? 1,
    topP: o.topP ?? 1,
    topK: o.topK ?? 0,
    eosTokenId: [...tok.stopTokenIds(), ...(o.stops ?? [])],
  });
  return { tokenIds: Array.from(r!.tokens), logprobs: Array.from(r!.logprobs), stopReason: r!.stopReason };
}

export function promptOf(text: string): number[] {
  return tok.applyChatTemplate([{ role: "user", content: text }], { addGenerationPrompt: true });
}

/** An HF folder of the tiny model with `seed`'s weights (config.json + model.safetensors). */
export function writeHfFolder(dir: string, seed: number): string {
  mkdirSync(dir, { recursive: true });
  const m = tinyModel(seed);
  writeFileSync(join(dir, "config.json"), JSON.stringify({ ...toHfConfig(tinyConfig), torch_dtype: "float32" }));
  writeFileSync(join(dir, "model.safetensors"), m.toSafetensors());
  m.dispose();
  return dir;
}
