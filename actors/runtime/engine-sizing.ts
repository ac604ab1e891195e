// How big the inference engine's KV pool is when the config does not say: room for maxSeqs sequences of the
// model's full context, capped by a memory budget, and never less than one full-context sequence (the engine
// refuses a request that could not fit alone). KV is one K and one V row per token, layer and KV head, in fp32.
import { headDimOf, type ModelConfig } from "../../kernels/model-config.js";

/** The default cap on the KV pool's memory: what an inference process can spare beside its model on a small machine. */
export const DEFAULT_KV_BYTES = 1 << 30;

export interface EngineSizing {
  kvBlocks: number;
  kvBlockSize: number;
  maxSeqs: number;
  maxPrefillTokens: number;
}

/** Bytes one KV block holds over every layer. */
export function kvBlockBytes(model: ModelConfig, blockSize: number): number {
  const headDim = headDimOf(model);
  return model.numLayers * 2 * model.numKvHeads * headDim * blockSize * 4;
}

export function engineSizing(
  model: ModelConfig,
  o: { kvBlocks?: number; kvBlockSize?: number; maxSeqs?: number; maxPrefillTokens?: number } = {},
): EngineSizing {
  const kvBlockSize = o.kvBlockSize ?? 16;
  const maxSeqs = o.maxSeqs ?? 256;
  const perSeq = Math.ceil(model.maxPositionEmbeddings / kvBlockSize);
  const byMemory = Math.floor(DEFAULT_KV_BYTES / kvBlockBytes(model, kvBlockSize));
  const kvBlocks = o.kvBlocks ?? Math.max(perSeq, Math.min(maxSeqs * perSeq, byMemory));
  return { kvBlocks, kvBlockSize, maxSeqs, maxPrefillTokens: o.maxPrefillTokens ?? 2048 };
}
