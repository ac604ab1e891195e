import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { decodeRolloutBatch, encodeRolloutBatch, RolloutBatchError, type DecodedRolloutBatch } from "../../streams/arrow-codec.js";
import { BATCH_FRAMING_SLACK_BYTES, encodeChunked, estimateRowBytes, planChunks, RowTooLargeError } from "../../streams/batch-split.js";
import type { RolloutBatchMetaInput, RolloutRow } from "../../streams/rollout-schema.js";
import { mulberry32 } from "../helpers/rng.js";

function row(rng: () => number, i: number, completion?: number): RolloutRow {
  const c = completion ?? (rng() < 0.1 ? 0 : Math.floor(rng() * 4000));
  const p = rng() < 0.1 ? 0 : Math.floor(rng() * 600);
  const names = ["correct", "format", "ré", "🎯"].filter(() => rng() < 0.5);
  return {
    taskId: `task-${i >> 3}`,
    groupId: `g-${i >> 3}`,
    env: rng() < 0.5 ? "gsm8k@1" : "环境-ü@2.0",
    exampleId: `ex-${i}`,
    promptIds: new Int32Array(p).map(() => Math.floor(rng() * 150_000)),
    completionIds: new Int32Array(c).map(() => Math.floor(rng() * 150_000)),
    completionMask: new Uint8Array(c).map(() => (rng() < 0.9 ? 1 : 0)),
    samplerLogprobs: new Float32Array(c).map(() => -rng() * 5),
    policyVersionMin: 3,
    policyVersionMax: 4,
    versionSpans: [],
    reward: rng(),
    advantage: rng() - 0.5,
    rewardComponents: Object.fromEntries(names.map((n) => [n, rng()])),
    isTruncated: rng() < 0.1,
    stopReason: rng() < 0.8 ? "stop" : "length",
    numTurns: 1,
    generateMs: rng() * 1000,
    scoreMs: rng() * 10,
    step: 12,
    exampleIndex: i,
    turnOffsets: Int32Array.from(c > 0 ? [0] : []),
    metrics: Object.fromEntries(names.map((n) => [`m_${n}`, rng() * 1e6])),
    envMs: rng() * 5,
    errors: rng() < 0.2 ? ["parse: no <answer> tag — ünïcode"] : [],
    stateJson: JSON.stringify({ promptLength: 1, note: "状態".repeat(Math.floor(rng() * 20)) }),
    messages: [
      { role: "user" as const, content: "x".repeat(Math.floor(rng() * 300)) },
      { role: "assistant" as const, content: "🎯".repeat(Math.floor(rng() * 100)) },
      ...(rng() < 0.3 ? [{ role: "tool" as const, content: "42", name: "lookup" }] : []),
    ],
  };
}

function rowsOf(n: number, seed: number, completion?: number): RolloutRow[] {
  const rng = mulberry32(seed);
  return Array.from({ length: n }, (_, i) => row(rng, i, completion));
}

const META: RolloutBatchMetaInput = { run: "r", producer: "reward-1", createdAt: "2025-06-01T00:00:00.000Z" };

/** Rows compared on their wire form (Float32 columns rounded). */
function wire(rows: RolloutRow[]): RolloutRow[] {
  return decodeRolloutBatch(encodeRolloutBatch(rows, META)).rows;
}

describe("estimateRowBytes", () => {
  test("is an upper bound of the encoded size, and not a loose one for token-heavy rows", () => {
    for (const seed of [1, 2, 3, 4]) {
      const rows = rowsOf(1 + ((seed * 13) % 40), seed);
      const empty = encodeRolloutBatch([], META).byteLength;
      const actual = encodeRolloutBatch(rows, META).byteLength;
      const estimate = empty + BATCH_FRAMING_SLACK_BYTES + rows.reduce((s, r) => s + estimateRowBytes(r), 0);
      assert.ok(actual <= estimate, `seed ${seed}: actual ${actual} > estimate ${estimate}`);
    }
    const big = rowsOf(64, 9, 2000);
    const actual = encodeRolloutBatch(big, META).byteLength;
    const sum = big.reduce((s, r) => s + estimateRowBytes(r), 0);
    assert.ok(sum < actual * 1.05, `estimate ${sum} is more than 5% above actual ${actual}`);
  });

  test("grows with tokens and UTF-8 bytes", () => {
    const [r] = rowsOf(1, 5, 10);
    const longer = { ...r!, completionIds: new Int32Array(20), completionMask: new Uint8Array(20), samplerLogprobs: new Float32Array(20) };
    assert.equal(estimateRowBytes(longer) - estimateRowBytes(r!), 10 * 9);
    assert.equal(estimateRowBytes({ ...r!, env: "é@1" }) - estimateRowBytes({ ...r!, env: "e@1" }), 1);
  });
});

// What the scored channel does with a group's rows: complete Arrow batches of <= maxBytes, each tagged.
function encodeRolloutChunks(rows: RolloutRow[], meta: RolloutBatchMetaInput, o: { maxBytes?: number; batchId: string }) {
  if (!o.batchId) throw new Error("batchId must be a non-empty string");
  return encodeChunked(rows, o.maxBytes ?? 8 * 1024 * 1024, (part, { chunk, chunks }) =>
    encodeRolloutBatch(part, { ...meta, batchId: o.batchId, chunk, chunks }),
  );
}

function chunkInfo(meta: DecodedRolloutBatch["meta"]) {
  return { batchId: meta["batchId"], chunk: meta["chunk"], chunks: meta["chunks"] };
}

describe("encodeChunked into tagged Arrow batches", () => {
  for (const [seed, maxBytes] of [
    [1, 64 * 1024],
    [2, 200 * 1024],
    [3, 1024 * 1024 - 64 * 1024],
  ] as const) {
    test(`every chunk <= ${maxBytes} bytes, standalone-valid, and together equal the original in order (seed ${seed})`, () => {
      const rows = rowsOf(120, seed);
      const chunks = encodeRolloutChunks(rows, { ...META, step: 12 }, { maxBytes, batchId: `task-${seed}` });
      assert.ok(chunks.length > 1, "test batch should need splitting");
      const decoded: DecodedRolloutBatch[] = [];
      chunks.forEach((c, k) => {
        assert.ok(c.bytes.byteLength <= maxBytes, `chunk ${k} is ${c.bytes.byteLength} bytes`);
        assert.equal(c.chunk, k);
        assert.equal(c.chunks, chunks.length);
        const d = decodeRolloutBatch(c.bytes);
        assert.deepEqual(chunkInfo(d.meta), { batchId: `task-${seed}`, chunk: k, chunks: chunks.length });
        assert.equal(d.meta.step, 12);
        assert.equal(d.rows.length, c.end - c.start);
        decoded.push(d);
      });
      assert.deepStrictEqual(
        decoded.flatMap((d) => d.rows),
        wire(rows),
      );
      // Chunks are reasonably full: the greedy plan does not waste messages.
      const total = chunks.reduce((s, c) => s + c.bytes.byteLength, 0);
      assert.ok(chunks.length <= Math.ceil(total / (maxBytes * 0.6)), `${chunks.length} chunks for ${total} bytes`);
    });
  }

  test("a batch that fits is one message, still tagged chunk 0 of 1", () => {
    const rows = rowsOf(10, 7, 100);
    const chunks = encodeRolloutChunks(rows, META, { batchId: "b1" });
    assert.equal(chunks.length, 1);
    const d = decodeRolloutBatch(chunks[0]!.bytes);
    assert.deepEqual(chunkInfo(d.meta), { batchId: "b1", chunk: 0, chunks: 1 });
    assert.deepStrictEqual(d.rows, wire(rows));
  });

  test("zero rows: one valid empty message", () => {
    const chunks = encodeRolloutChunks([], META, { maxBytes: 8192, batchId: "empty" });
    assert.equal(chunks.length, 1);
    assert.deepEqual(decodeRolloutBatch(chunks[0]!.bytes).rows, []);
  });

  test("the 256 x 1024-token batch fits 8 MB in one message and a 1 MB server in 3", () => {
    const rows = rowsOf(256, 8, 896).map((r) => ({ ...r, promptIds: new Int32Array(128) }));
    assert.equal(encodeRolloutChunks(rows, META, { batchId: "b", maxBytes: 8 * 1024 * 1024 }).length, 1);
    const oneMb = encodeRolloutChunks(rows, META, { batchId: "b", maxBytes: 1024 * 1024 - 64 * 1024 });
    assert.equal(oneMb.length, 3);
    assert.deepEqual(
      oneMb.map((c) => c.end - c.start).reduce((a, b) => a + b, 0),
      256,
    );
  });

  test("a single row larger than maxBytes throws RowTooLargeError naming the row", () => {
    const rows = [...rowsOf(3, 9, 50), ...rowsOf(1, 10, 40_000), ...rowsOf(2, 11, 50)];
    assert.throws(
      () => encodeRolloutChunks(rows, META, { maxBytes: 100_000, batchId: "b" }),
      (e: unknown) => e instanceof RowTooLargeError && e.rowIndex === 3 && e.bytes > 100_000 && /row 3 needs \d+ bytes.*object store/.test(e.message),
    );
  });

  test("invalid rows are rejected before anything is split", () => {
    const rows = rowsOf(40, 12, 500);
    rows[33] = { ...rows[33]!, reward: NaN };
    assert.throws(
      () => encodeRolloutChunks(rows, META, { maxBytes: 50_000, batchId: "b" }),
      (e: unknown) => e instanceof RolloutBatchError && e.row !== undefined,
    );
  });

  test("batchId is required and maxBytes must leave room for rows", () => {
    assert.throws(() => encodeRolloutChunks(rowsOf(1, 1), META, { batchId: "" }), /batchId/);
    assert.throws(() => encodeRolloutChunks(rowsOf(1, 1), META, { batchId: "b", maxBytes: 1000 }), /leaves no room/);
    assert.throws(() => encodeRolloutChunks(rowsOf(1, 1), META, { batchId: "b", maxBytes: -5 }), /positive integer/);
  });
});

describe("encodeChunked / planChunks", () => {
  test("an encoder whose output the estimate under-predicts is handled by halving and re-encoding", () => {
    const rows = rowsOf(20, 13, 200);
    const maxBytes = 64 * 1024;
    // Pretends chunks of more than 3 rows are oversized, whatever the estimate said.
    const encode = (part: RolloutRow[], p: { chunk: number; chunks: number }): Uint8Array =>
      part.length > 3 ? new Uint8Array(maxBytes + 1) : encodeRolloutBatch(part, { ...META, batchId: "x", ...p });
    const chunks = encodeChunked(rows, maxBytes, encode);
    assert.ok(chunks.every((c) => c.rows.length <= 3 && c.bytes.byteLength <= maxBytes));
    assert.deepEqual(
      chunks.map((c) => c.chunk),
      chunks.map((_, k) => k),
    );
    assert.ok(chunks.every((c) => c.chunks === chunks.length));
    assert.deepEqual(
      chunks.flatMap((c) => c.rows),
      rows,
    );
    // Each chunk's metadata was written with the FINAL chunk count.
    for (const c of chunks) assert.equal(decodeRolloutBatch(c.bytes).meta.chunks, chunks.length);
  });

  test("planChunks covers every row exactly once, in order, with no empty chunk", () => {
    const rows = rowsOf(200, 17);
    for (const maxBytes of [30_000, 100_000, 1_000_000]) {
      const ranges = planChunks(rows, maxBytes, 4096);
      assert.equal(ranges[0]!.start, 0);
      assert.equal(ranges.at(-1)!.end, rows.length);
      for (let k = 0; k < ranges.length; k++) {
        assert.ok(ranges[k]!.end > ranges[k]!.start);
        if (k > 0) assert.equal(ranges[k]!.start, ranges[k - 1]!.end);
        const est = 4096 + rows.slice(ranges[k]!.start, ranges[k]!.end).reduce((s, r) => s + estimateRowBytes(r), 0);
        assert.ok(est <= maxBytes || ranges[k]!.end - ranges[k]!.start === 1);
      }
    }
    assert.deepEqual(planChunks([], 1000, 10), [{ start: 0, end: 0 }]);
  });
});
