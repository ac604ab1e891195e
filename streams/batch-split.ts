// Splits a rollout batch that would exceed the server's max payload into several COMPLETE Arrow
// messages (by rows, order kept), each a valid standalone batch whose metadata carries
// batchId / chunk / chunks. Nothing is dropped: a single row that cannot fit throws RowTooLargeError,
// and the caller carries that row another way (object store).
//
// Sizes are planned with estimateRowBytes (a cheap, deliberately conservative upper bound) and, when an
// encoder is given, verified on the real encoded bytes: a chunk that still comes out too large is halved
// and everything re-encoded, so the result never relies on the estimate being right.
import { Buffer } from "node:buffer";
import { encodeRolloutBatch, RolloutBatchError, type DecodedRolloutBatch } from "./arrow-codec.js";
import type { RolloutBatchMeta, RolloutBatchMetaInput, RolloutRow } from "./rollout-schema.js";

/** The server's default max payload in this project (deploy/local/nats-server.ts raises it to 8 MB). */
export const DEFAULT_MAX_PAYLOAD_BYTES = 8 * 1024 * 1024;

/**
 * Per-batch bytes beyond the rows' own buffers: IPC framing, record-batch and dictionary-batch headers
 * and up to 7 bytes of padding per buffer. Measured empty-batch size is ~1.5 KB; this is generous.
 */
export const BATCH_FRAMING_SLACK_BYTES = 2048;

/** Room assumed for caller metadata when no encoder is given to measure it. */
export const DEFAULT_METADATA_ALLOWANCE_BYTES = 8192;

export interface ChunkPart {
  chunk: number;
  chunks: number;
}

export interface ChunkRange {
  /** First row (inclusive). */
  start: number;
  /** Last row (exclusive). */
  end: number;
}

export interface EncodedChunk extends ChunkPart, ChunkRange {
  rows: RolloutRow[];
  bytes: Uint8Array;
}

export type ChunkEncoder = (rows: RolloutRow[], part: ChunkPart) => Uint8Array;

/** A single row is larger than the max payload on its own: send it by other means (object store). */
export class RowTooLargeError extends Error {
  override readonly name = "RowTooLargeError";
  constructor(
    readonly rowIndex: number,
    readonly bytes: number,
    readonly maxBytes: number,
    measured: boolean,
  ) {
    super(
      `rollout row ${rowIndex} needs ${measured ? "" : "an estimated "}${bytes} bytes as a batch of its own, more than the ` +
        `${maxBytes}-byte limit: carry it via the object store or raise max_payload`,
    );
  }
}

/**
 * Upper bound of the bytes one row adds to an encoded batch (its values, offsets and validity share).
 * Exact for the token lists; strings count UTF-8 bytes; the stop reason is counted as if never shared.
 */
export function estimateRowBytes(row: RolloutRow): number {
  const strings =
    Buffer.byteLength(row.taskId, "utf8") +
    Buffer.byteLength(row.groupId, "utf8") +
    Buffer.byteLength(row.env, "utf8") +
    Buffer.byteLength(row.exampleId, "utf8") +
    Buffer.byteLength(row.stopReason, "utf8") +
    4 * 4; // taskId/groupId/env/exampleId offsets
  const tokens = 4 * row.promptIds.length + 9 * row.completionIds.length + 4 * 4; // ids 4 + mask 1 + logprob 4; 4 list offsets
  let components = 4; // map offset
  for (const k of Object.keys(row.rewardComponents)) components += Buffer.byteLength(k, "utf8") + 4 + 4; // key, key offset, value
  // Int32 x4 (versions, turns, step), Float32 x2, Float64 x2, dictionary index, stop-reason offset, 1 bool byte.
  const fixed = 4 * 4 + 4 * 2 + 8 * 2 + 4 + 4 + 1;
  return strings + tokens + components + fixed;
}

function checkMaxBytes(maxBytes: number): void {
  if (!Number.isInteger(maxBytes) || maxBytes <= 0) throw new Error(`maxBytes must be a positive integer, got ${String(maxBytes)}`);
}

/**
 * Greedy row ranges whose estimated size (overheadBytes + sum of estimateRowBytes) stays <= maxBytes.
 * A row that cannot fit even alone gets a range of its own (the caller decides: measure or throw).
 * Zero rows give one empty range, so an empty batch is still one message.
 */
export function planChunks(rows: readonly RolloutRow[], maxBytes: number, overheadBytes: number): ChunkRange[] {
  checkMaxBytes(maxBytes);
  const budget = maxBytes - overheadBytes;
  const ranges: ChunkRange[] = [];
  let start = 0;
  let used = 0;
  for (let i = 0; i < rows.length; i++) {
    const b = estimateRowBytes(rows[i]!);
    if (i > start && used + b > budget) {
      ranges.push({ start, end: i });
      start = i;
      used = 0;
    }
    used += b;
  }
  ranges.push({ start, end: rows.length });
  return ranges;
}

/**
 * Encodes `rows` as as few messages as fit in maxBytes each, every one verified on its real size.
 * `encode` receives each chunk's rows and its chunk/chunks numbers (to put in its metadata).
 * A row too large even alone throws RowTooLargeError, unless `allowOversizedRows`: then it becomes a
 * chunk of its own, larger than maxBytes, for the caller to send by other means (publishPayload's blob).
 */
export function encodeChunked(
  rows: readonly RolloutRow[],
  maxBytes: number,
  encode: ChunkEncoder,
  opts: { allowOversizedRows?: boolean } = {},
): EncodedChunk[] {
  checkMaxBytes(maxBytes);
  const empty = encode([], { chunk: 0, chunks: 1 }).byteLength;
  if (empty > maxBytes) {
    throw new Error(`maxBytes ${maxBytes} leaves no room for rows: an empty batch with this metadata is already ${empty} bytes`);
  }
  let ranges = planChunks(rows, maxBytes, empty + BATCH_FRAMING_SLACK_BYTES);
  for (;;) {
    const chunks = ranges.length;
    const out: EncodedChunk[] = ranges.map((r, chunk) => {
      const part = rows.slice(r.start, r.end);
      return { chunk, chunks, start: r.start, end: r.end, rows: part, bytes: encode(part, { chunk, chunks }) };
    });
    const fits = (c: EncodedChunk) => c.bytes.byteLength <= maxBytes || (opts.allowOversizedRows === true && c.end - c.start <= 1);
    if (out.every(fits)) return out;
    // The estimate is an upper bound, so this only happens for a lone oversized row or an encoder that
    // adds more per-chunk bytes than the empty encode showed: halve the offenders and try again.
    const next: ChunkRange[] = [];
    for (const c of out) {
      if (fits(c)) next.push({ start: c.start, end: c.end });
      else if (c.end - c.start <= 1) throw new RowTooLargeError(c.start, c.bytes.byteLength, maxBytes, true);
      else {
        const mid = c.start + ((c.end - c.start) >> 1);
        next.push({ start: c.start, end: mid }, { start: mid, end: c.end });
      }
    }
    ranges = next;
  }
}

let defaultOverhead: number | undefined;
function defaultOverheadBytes(): number {
  // Empty batch with typical metadata, plus room for whatever else the caller puts in its metadata.
  defaultOverhead ??=
    encodeRolloutBatch([], {
      run: "run",
      producer: "producer",
      createdAt: new Date(0).toISOString(),
      batchId: "batch",
      chunk: 0,
      chunks: 1,
    }).byteLength +
    BATCH_FRAMING_SLACK_BYTES +
    DEFAULT_METADATA_ALLOWANCE_BYTES;
  return defaultOverhead;
}

/**
 * Row chunks that each encode to <= maxBytes, order kept. Without `encode` the plan relies on the
 * conservative estimate (assuming <= 8 KB of caller metadata); with it, every chunk is encoded and
 * checked (use encodeChunked/encodeRolloutChunks instead to keep those bytes rather than re-encode).
 * Throws RowTooLargeError if a single row cannot fit.
 */
export function splitRowsToFit(rows: readonly RolloutRow[], maxBytes: number, encode?: ChunkEncoder): RolloutRow[][] {
  if (encode) return encodeChunked(rows, maxBytes, encode).map((c) => c.rows);
  checkMaxBytes(maxBytes);
  const overhead = defaultOverheadBytes();
  if (overhead >= maxBytes) throw new Error(`maxBytes ${maxBytes} leaves no room for rows (batch overhead ~${overhead} bytes)`);
  return planChunks(rows, maxBytes, overhead).map((r) => {
    if (r.end - r.start === 1) {
      const b = overhead + estimateRowBytes(rows[r.start]!);
      if (b > maxBytes) throw new RowTooLargeError(r.start, b, maxBytes, false);
    }
    return rows.slice(r.start, r.end);
  });
}

/**
 * The one call a producer needs: encode `rows` as Arrow messages of <= maxBytes each, every message's
 * metadata carrying batchId/chunk/chunks (even when there is only one). Publish chunk c with msg-id
 * `<batchId>:<c>` so a retry dedupes. `batchId` must be deterministic (e.g. the task id), never random.
 * Leave room for NATS headers: pass maxBytes = server max_payload minus a header allowance.
 */
export function encodeRolloutChunks(
  rows: readonly RolloutRow[],
  meta: RolloutBatchMetaInput,
  opts: { maxBytes?: number; batchId: string },
): EncodedChunk[] {
  if (typeof opts.batchId !== "string" || opts.batchId.length === 0) throw new Error("encodeRolloutChunks: batchId must be a non-empty string");
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  return encodeChunked(rows, maxBytes, (part, { chunk, chunks }) => encodeRolloutBatch(part, { ...meta, batchId: opts.batchId, chunk, chunks }));
}

export interface ChunkInfo {
  batchId: string;
  chunk: number;
  chunks: number;
}

/** The chunk fields of a decoded batch's metadata; undefined if it was not sent in chunks. */
export function readChunkInfo(meta: RolloutBatchMeta): ChunkInfo | undefined {
  const { batchId, chunk, chunks } = meta;
  if (batchId === undefined && chunk === undefined && chunks === undefined) return undefined;
  if (typeof batchId !== "string" || batchId.length === 0) throw new RolloutBatchError(`metadata "batchId" must be a non-empty string, got ${JSON.stringify(batchId)}`);
  if (typeof chunks !== "number" || !Number.isInteger(chunks) || chunks < 1) throw new RolloutBatchError(`metadata "chunks" must be an integer >= 1, got ${JSON.stringify(chunks)}`);
  if (typeof chunk !== "number" || !Number.isInteger(chunk) || chunk < 0 || chunk >= chunks) {
    throw new RolloutBatchError(`metadata "chunk" must be an integer in [0, ${chunks}), got ${JSON.stringify(chunk)}`);
  }
  return { batchId, chunk, chunks };
}

/**
 * Reassembles the decoded chunks of ONE batch (any arrival order) into its rows in original order.
 * Throws if chunks are missing, duplicated or from different batches.
 */
export function assembleChunks(parts: readonly DecodedRolloutBatch[]): { batchId: string; rows: RolloutRow[] } {
  if (parts.length === 0) throw new RolloutBatchError("assembleChunks: no chunks given");
  const infos = parts.map((p) => readChunkInfo(p.meta));
  const first = infos[0];
  if (!first) throw new RolloutBatchError("assembleChunks: batch metadata has no batchId/chunk/chunks");
  if (first.chunks < parts.length) throw new RolloutBatchError(`assembleChunks: ${parts.length} chunks given for batch ${JSON.stringify(first.batchId)} of ${first.chunks}`);
  if (first.chunks > parts.length) {
    const have = new Set(infos.map((i) => i?.chunk));
    const missing = [];
    for (let c = 0; c < first.chunks && missing.length < 10; c++) if (!have.has(c)) missing.push(c);
    throw new RolloutBatchError(`assembleChunks: batch ${JSON.stringify(first.batchId)} is missing chunk(s) ${missing.join(", ")} (${parts.length} of ${first.chunks} given)`);
  }
  const ordered: (RolloutRow[] | undefined)[] = new Array(first.chunks);
  infos.forEach((info, k) => {
    if (!info || info.batchId !== first.batchId || info.chunks !== first.chunks) {
      throw new RolloutBatchError(`assembleChunks: chunk ${k} belongs to ${JSON.stringify(info)}, not batch ${JSON.stringify(first.batchId)} of ${first.chunks}`);
    }
    if (ordered[info.chunk]) throw new RolloutBatchError(`assembleChunks: chunk ${info.chunk} of batch ${JSON.stringify(first.batchId)} given twice`);
    ordered[info.chunk] = parts[k]!.rows;
  });
  const missing = [...ordered.keys()].filter((c) => !ordered[c]);
  if (missing.length > 0) throw new RolloutBatchError(`assembleChunks: batch ${JSON.stringify(first.batchId)} is missing chunk(s) ${missing.join(", ")}`);
  return { batchId: first.batchId, rows: ordered.flatMap((r) => r!) };
}
