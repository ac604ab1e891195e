// Packs samples into micro-batches: several sequences share one row of at most `microBatchTokens` tokens, with
// segment starts so no attention crosses a sequence boundary. With `sharePrefix`, samples that share a token prefix
// (a group's G completions of one prompt; multi-turn rows with a common history) are laid out as the prefix once,
// then each sample's own tokens as a child segment of it (kernels.h, seg_parent): the same loss and gradient as the
// unpacked rows, for L + sum(len_i - L) tokens instead of sum(len_i). A family too long for one micro-batch is
// split over several, each with its own copy of the prefix. Per-token arrays are indexed by the token being
// predicted (the kernels' convention).
import { type Family, prefixFamilies } from "./prefix-families.js";

export interface TrainSample {
  promptIds: ArrayLike<number>;
  completionIds: ArrayLike<number>;
  completionMask: ArrayLike<number>;
  samplerLogprobs: ArrayLike<number>;
  advantage: number;
}

export interface PackedMicroBatch {
  tokens: Int32Array;
  segmentStarts: Int32Array;
  /** Present when a segment continues a shared prefix (-1: a root segment). */
  segmentParents?: Int32Array;
  lossMask: Uint8Array;
  advantages: Float32Array;
  samplerLogprobs: Float32Array;
}

export interface PackResult {
  microBatches: PackedMicroBatch[];
  lossTokens: number;
  /** Tokens the kernels compute (a shared prefix once per micro-batch it appears in). */
  totalTokens: number;
  /** Tokens the same samples would cost packed one after another (each with its whole prefix). */
  unpackedTokens: number;
  /** Completion tokens cut because prompt + completion exceeded the context. */
  truncatedTokens: number;
}

export interface PackOptions {
  /** Lay a shared token prefix out once for the samples that share it (default false). */
  sharePrefix?: boolean;
}

// One sample, cut to the context, with its per-token arrays indexed by position in its own sequence.
interface Seq {
  tokens: Int32Array;
  lossMask: Uint8Array;
  advantage: number;
  samplerLogprobs: Float32Array;
  firstLoss: number;
}

function toSeq(s: TrainSample, contextLength: number): Seq {
  const P = s.promptIds.length;
  const len = Math.min(P + s.completionIds.length, contextLength);
  const seq: Seq = {
    tokens: new Int32Array(len),
    lossMask: new Uint8Array(len),
    advantage: s.advantage,
    samplerLogprobs: new Float32Array(len),
    firstLoss: len,
  };
  for (let t = 0; t < len; t++) {
    const inPrompt = t < P;
    seq.tokens[t] = inPrompt ? s.promptIds[t]! : s.completionIds[t - P]!;
    if (inPrompt || t === 0 || !s.completionMask[t - P]) continue;
    seq.lossMask[t] = 1;
    seq.samplerLogprobs[t] = s.samplerLogprobs[t - P]!;
    seq.firstLoss = Math.min(seq.firstLoss, t);
  }
  return seq;
}

// A piece of a micro-batch: `prefix` tokens of seqs[members[0]] as a parent (0: none), then each member from there.
interface Chunk {
  members: number[];
  prefix: number;
}

const chunkTokens = (seqs: Seq[], c: Chunk) => c.prefix + c.members.reduce((n, i) => n + seqs[i]!.tokens.length - c.prefix, 0);

/** Splits families into chunks and chunks into micro-batches, filling each micro-batch before starting the next. */
function layout(seqs: Seq[], families: Family[], microBatchTokens: number): Chunk[][] {
  const batches: Chunk[][] = [];
  let current: Chunk[] = [];
  let used = 0;
  const flush = () => {
    if (current.length > 0) batches.push(current);
    current = [];
    used = 0;
  };
  for (const f of families) {
    // A member with nothing past the prefix trains nothing (the prefix holds no loss token): leave it out.
    let members = f.members.filter((i) => seqs[i]!.tokens.length > f.prefix);
    if (f.prefix === 0 || members.length < 2) {
      for (const i of f.members) {
        const len = seqs[i]!.tokens.length;
        if (used + len > microBatchTokens && used > 0) flush();
        current.push({ members: [i], prefix: 0 });
        used += len;
      }
      continue;
    }
    while (members.length > 0) {
      const take: number[] = [];
      let cost = f.prefix;
      for (const i of members) {
        const own = seqs[i]!.tokens.length - f.prefix;
        if (take.length > 0 && used + cost + own > microBatchTokens) break;
        take.push(i);
        cost += own;
      }
      if (used > 0 && used + cost > microBatchTokens) {
        flush();
        continue; // retry the same members on an empty micro-batch
      }
      current.push({ members: take, prefix: take.length > 1 ? f.prefix : 0 });
      used += chunkTokens(seqs, current[current.length - 1]!);
      members = members.slice(take.length);
      if (members.length > 0) flush();
    }
  }
  flush();
  return batches;
}

function emit(seqs: Seq[], chunks: Chunk[]): PackedMicroBatch {
  const T = chunks.reduce((n, c) => n + chunkTokens(seqs, c), 0);
  const S = chunks.reduce((n, c) => n + c.members.length + (c.prefix > 0 ? 1 : 0), 0);
  const shared = chunks.some((c) => c.prefix > 0);
  const mb: PackedMicroBatch = {
    tokens: new Int32Array(T),
    segmentStarts: new Int32Array(S),
    ...(shared ? { segmentParents: new Int32Array(S).fill(-1) } : {}),
    lossMask: new Uint8Array(T),
    advantages: new Float32Array(T),
    samplerLogprobs: new Float32Array(T),
  };
  let off = 0,
    seg = 0;
  const put = (q: Seq, from: number, parent: number) => {
    mb.segmentStarts[seg] = off;
    if (mb.segmentParents) mb.segmentParents[seg] = parent;
    seg++;
    for (let t = from; t < q.tokens.length; t++, off++) {
      mb.tokens[off] = q.tokens[t]!;
      if (!q.lossMask[t]) continue;
      mb.lossMask[off] = 1;
      mb.advantages[off] = q.advantage;
      mb.samplerLogprobs[off] = q.samplerLogprobs[t]!;
    }
  };
  for (const c of chunks) {
    if (c.prefix === 0) {
      for (const i of c.members) put(seqs[i]!, 0, -1);
      continue;
    }
    const parent = seg;
    put({ ...seqs[c.members[0]!]!, tokens: seqs[c.members[0]!]!.tokens.subarray(0, c.prefix) }, 0, -1);
    for (const i of c.members) put(seqs[i]!, c.prefix, parent);
  }
  return mb;
}

export function packSamples(samples: TrainSample[], microBatchTokens: number, contextLength: number, opts: PackOptions = {}): PackResult {
  let truncatedTokens = 0;
  const seqs: Seq[] = [];
  for (const s of samples) {
    const full = s.promptIds.length + s.completionIds.length;
    const seq = toSeq(s, contextLength);
    truncatedTokens += full - seq.tokens.length;
    if (seq.tokens.length >= 2) seqs.push(seq); // a single token predicts nothing
  }
  const families: Family[] = opts.sharePrefix ? prefixFamilies(seqs) : seqs.map((_, i) => ({ members: [i], prefix: 0 }));
  const microBatches = layout(seqs, families, microBatchTokens).map((chunks) => emit(seqs, chunks));
  return {
    microBatches,
    lossTokens: seqs.reduce((n, q) => n + q.lossMask.reduce((a, b) => a + b, 0), 0),
    totalTokens: microBatches.reduce((n, mb) => n + mb.tokens.length, 0),
    unpackedTokens: seqs.reduce((n, q) => n + q.tokens.length, 0),
    truncatedTokens,
  };
}
