// Splits a rollout batch that would exceed the server's max payload into several COMPLETE Arrow
// messages (by rows, order kept), each a valid standalone batch whose metadata carries
// batchId / chunk / chunks. Nothing is dropped: a single row that cannot fit throws RowTooLargeError,
// and the caller carries that row another way (object store).
//
// Sizes are planned with estimateRowBytes (a cheap, deliberately conservative upper bound) and, when an
// encoder is given, verified on the real encoded bytes: a chunk that still comes out too large is halved
// and everything re-encoded, so the result never relies on the estimate being right.
import { Buffer } from "node:buffer";
import type { RolloutRow } from "./rollout-schema.js";

/**
 * Per-batch bytes beyond the rows' own buffers: IPC framing, record-batch and dictionary-batch headers
 * and up to 7 bytes of padding per buffer. Measured empty-batch size is ~1.5 KB; this is generous.
 */
export const BATCH_FRAMING_SLACK_BYTES = 2048;

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
 * Exact for the token lists; strings count UTF-8 bytes; the stop reason and roles are counted as if never shared.
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
  let metrics = 4;
  for (const k of Object.keys(row.metrics)) metrics += Buffer.byteLength(k, "utf8") + 4 + 8;
  // Transcript: four strings per message (role, content, name, call id) with their offsets, plus a list offset.
  let transcript = 4 + 4 * row.turnOffsets.length + 4 + Buffer.byteLength(row.stateJson, "utf8") + 4;
  for (const m of row.messages) transcript += 16 + Buffer.byteLength(m.role + m.content + (m.name ?? "") + (m.toolCallId ?? ""), "utf8");
  for (const e of row.errors) transcript += 4 + Buffer.byteLength(e, "utf8");
  // Int32 x5 (versions, turns, step, example index), Float32 x2, Float64 x3, dictionary index, stop-reason offset, 1 bool byte.
  const fixed = 4 * 5 + 4 * 2 + 8 * 3 + 4 + 4 + 1;
  return strings + tokens + components + metrics + transcript + fixed;
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
