// The sampling API's request and result types, their validation, and the conversion to and from the
// addon's flat arrays.
import type { NativeGenerateConfig, NativeGenerateOutput } from "./native.js";
import { checkTokenIds, expectArray, expectInt } from "./validate.js";

export type StopReason = "eos" | "stop" | "length" | "context";

export interface GenerateRequest {
  /** Ragged batch of prompt token ids (each non-empty, at most maxPositionEmbeddings long). */
  prompts: Int32Array[];
  /** New tokens per prompt, at most. */
  maxNewTokens: number;
  /** Default 1. 0 = greedy (argmax). */
  temperature?: number;
  /** Nucleus sampling mass in (0, 1]; default 1 (off). */
  topP?: number;
  /** Keep the k most likely tokens; default 0 (off). */
  topK?: number;
  /** Base seed; prompt i samples from the stream (seed, i). Default 0. */
  seed?: number | bigint;
  /** Per-prompt seeds overriding (seed, i): prompt i's output then depends only on its prompt and seeds[i]. */
  seeds?: Array<number | bigint>;
  /** Token id(s) that end a sequence; the id is kept in the output. */
  eosTokenId?: number | number[];
  /** Token sequences that end a sequence when the generated tokens end with one (kept in the output). */
  stopSequences?: Int32Array[];
  /** Tests: also return the raw logits each token was sampled from ([tokens, vocab]). */
  returnLogits?: boolean;
  /**
   * Only ids below this are candidates (the distribution, its normaliser and both logprobs cover
   * [0, vocabLimit)): for a checkpoint whose embedding is padded past its tokenizer. Default: the whole vocab.
   */
  vocabLimit?: number;
}

export interface GenerateResult {
  /** New tokens only. */
  tokens: Int32Array;
  /**
   * Log-probability of each sampled token under the distribution it was actually drawn from: the logits
   * divided by the temperature, restricted to top-k then top-p, renormalised. 0 for greedy decoding (the
   * distribution is a point mass). This is what the learner's importance ratio compares against.
   */
  logprobs: Float32Array;
  /** log_softmax of the raw (untempered, unfiltered) logits at the sampled token. */
  policyLogprobs: Float32Array;
  /** eos: an eos id; stop: a stop sequence; length: maxNewTokens; context: maxPositionEmbeddings reached. */
  stopReason: StopReason;
  /** [tokens.length, vocab], only with returnLogits. */
  stepLogits?: Float32Array;
}

const U64_MAX = (1n << 64n) - 1n;

export function toSeed(what: string, v: number | bigint): bigint {
  if (typeof v === "bigint") {
    if (v < 0n || v > U64_MAX) throw new RangeError(`${what} must fit in an unsigned 64-bit integer (got ${v})`);
    return v;
  }
  return BigInt(expectInt(what, v, 0));
}

/** eosTokenId (one id or several) as the addon's Int32Array. */
export function toEos(fn: string, eosTokenId: number | number[] | undefined, vocab: number): Int32Array {
  const eosList = eosTokenId === undefined ? [] : Array.isArray(eosTokenId) ? eosTokenId : [eosTokenId];
  return Int32Array.from(eosList.map((id, i) => expectInt(`${fn}: eosTokenId${Array.isArray(eosTokenId) ? `[${i}]` : ""}`, id, 0, vocab - 1)));
}

/** Stop sequences as the addon's flat ids and offsets. */
export function toStops(fn: string, stopSequences: Int32Array[] | undefined, vocab: number): { stopFlat: Int32Array; stopOffsets: Int32Array } {
  const stops = stopSequences ?? [];
  if (!Array.isArray(stops)) throw new TypeError(`${fn}: stopSequences must be an array of Int32Array`);
  const stopOffsets = new Int32Array(stops.length + 1);
  stops.forEach((s, i) => {
    expectArray(`${fn}: stopSequences[${i}]`, s, Int32Array);
    if (s.length === 0) throw new RangeError(`${fn}: stopSequences[${i}] is empty`);
    checkTokenIds(`${fn}: stopSequences[${i}]`, s, vocab);
    stopOffsets[i + 1] = stopOffsets[i] + s.length;
  });
  const stopFlat = new Int32Array(stopOffsets[stops.length]);
  stops.forEach((s, i) => stopFlat.set(s, stopOffsets[i]));
  return { stopFlat, stopOffsets };
}

export const STOP_REASON_NAMES: readonly StopReason[] = ["eos", "stop", "length", "context"];

export interface NativeGenerateArgs {
  flat: Int32Array;
  offsets: Float64Array;
  seeds: BigUint64Array | null;
  config: NativeGenerateConfig;
}

export function toNativeGenerate(req: GenerateRequest, vocab: number, maxPositions: number): NativeGenerateArgs {
  if (typeof req !== "object" || req === null) throw new TypeError("generate: request must be an object");
  if (!Array.isArray(req.prompts) || req.prompts.length === 0) throw new TypeError("generate: prompts must be a non-empty array of Int32Array");
  let total = 0;
  req.prompts.forEach((p, i) => {
    expectArray(`generate: prompts[${i}]`, p, Int32Array);
    if (p.length === 0) throw new RangeError(`generate: prompts[${i}] is empty`);
    if (p.length > maxPositions) throw new RangeError(`generate: prompts[${i}] has ${p.length} tokens, past maxPositionEmbeddings ${maxPositions}`);
    checkTokenIds(`generate: prompts[${i}]`, p, vocab);
    total += p.length;
  });
  const maxNewTokens = expectInt("generate: maxNewTokens", req.maxNewTokens, 0, 1 << 24);
  const temperature = req.temperature ?? 1;
  if (typeof temperature !== "number" || !(temperature >= 0) || !Number.isFinite(temperature)) {
    throw new RangeError(`generate: temperature must be a finite number >= 0 (got ${temperature})`);
  }
  const topP = req.topP ?? 1;
  if (typeof topP !== "number" || !(topP > 0 && topP <= 1)) throw new RangeError(`generate: topP must be in (0, 1] (got ${topP})`);
  const topK = expectInt("generate: topK", req.topK ?? 0, 0, 2 ** 31 - 1);
  const seed = toSeed("generate: seed", req.seed ?? 0);
  let seeds: BigUint64Array | null = null;
  if (req.seeds !== undefined) {
    if (!Array.isArray(req.seeds) || req.seeds.length !== req.prompts.length) {
      throw new RangeError(`generate: seeds must be an array with one seed per prompt (${req.prompts.length})`);
    }
    seeds = BigUint64Array.from(req.seeds.map((s, i) => toSeed(`generate: seeds[${i}]`, s)));
  }
  const eos = toEos("generate", req.eosTokenId, vocab);
  const { stopFlat, stopOffsets } = toStops("generate", req.stopSequences, vocab);
  const flat = new Int32Array(total);
  const offsets = new Float64Array(req.prompts.length + 1);
  req.prompts.forEach((p, i) => {
    flat.set(p, offsets[i]);
    offsets[i + 1] = offsets[i] + p.length;
  });
  const returnLogits = req.returnLogits ?? false;
  if (typeof returnLogits !== "boolean") throw new TypeError("generate: returnLogits must be a boolean");
  const vocabLimit = req.vocabLimit === undefined ? 0 : expectInt("generate: vocabLimit", req.vocabLimit, 1, vocab);
  return { flat, offsets, seeds, config: { maxNewTokens, temperature, topP, topK, seed, eos, stopFlat, stopOffsets, returnLogits, vocabLimit } };
}

export function fromNativeGenerate(out: NativeGenerateOutput, n: number, maxNewTokens: number, vocab: number): GenerateResult[] {
  const results: GenerateResult[] = [];
  for (let i = 0; i < n; i++) {
    const len = out.lengths[i];
    const at = i * maxNewTokens;
    const r: GenerateResult = {
      tokens: out.tokens.slice(at, at + len),
      logprobs: out.logprobs.slice(at, at + len),
      policyLogprobs: out.policyLogprobs.slice(at, at + len),
      stopReason: STOP_REASON_NAMES[out.stopReasons[i]],
    };
    if (out.stepLogits) r.stepLogits = out.stepLogits.slice(at * vocab, (at + len) * vocab);
    results.push(r);
  }
  return results;
}
