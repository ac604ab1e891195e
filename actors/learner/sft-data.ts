// SFT on the environments' gold replies (synthetic worked solutions): prompt tokens unmasked, the
// gold assistant turn (plus the end-of-turn token) trained on.
import type { Tokenizer } from "../../kernels/tokenizer.js";
import type { LoadedEnvironment } from "../runtime/environments.js";
import { hash32, pickEnvironment } from "../../rl/mixing.js";
import type { TrainSample } from "../../kernels/packing.js";

export function sftBatch(envs: LoadedEnvironment[], tokenizer: Tokenizer, seed: number, step: number, batchSize: number): TrainSample[] {
  const capable = envs.filter((e) => typeof e.env.sftTarget === "function");
  if (capable.length === 0) throw new Error("sft stage configured but no environment of this run provides sftTarget()");
  const endId = tokenizer.stopTokenIds()[0]!;
  const out: TrainSample[] = [];
  for (let i = 0; i < batchSize; i++) {
    const index = step * batchSize + i;
    const loaded = pickEnvironment(capable, seed, index);
    const ds = loaded.env.dataset("train");
    const exampleIndex = Number.isFinite(ds.size) ? hash32(seed + 1, index) % ds.size : hash32(seed + 1, index);
    const row = ds.row(exampleIndex);
    const promptIds = tokenizer.applyChatTemplate(row.prompt, { addGenerationPrompt: true });
    const completionIds = [...tokenizer.encode(loaded.env.sftTarget!(row)), endId];
    out.push({
      promptIds,
      completionIds,
      completionMask: completionIds.map(() => 1),
      samplerLogprobs: completionIds.map(() => 0),
      advantage: 0,
    });
  }
  return out;
}
