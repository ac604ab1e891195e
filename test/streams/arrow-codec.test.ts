import { test, describe } from "node:test";
import assert from "node:assert/strict";
import {
  Dictionary,
  Field,
  Float32,
  Float64,
  Int32,
  List,
  Utf8,
  makeData,
  makeVector,
  RecordBatch,
  Schema,
  Struct,
  Table,
  tableFromIPC,
  tableToIPC,
  type Data,
} from "apache-arrow";
import {
  decodeRolloutBatch,
  encodeRolloutBatch,
  encodeRolloutBatchUnchecked,
  RolloutBatchError,
  validateRolloutRows,
} from "../../streams/arrow-codec.js";
import { ROLLOUT_SCHEMA_VERSION, type RolloutBatchMetaInput, type RolloutRow } from "../../streams/rollout-schema.js";
import { mulberry32 } from "../helpers/rng.js";


const ENVS = ["gsm8k@1", "math-500@2.1.0", "código@0.3", "数学推理@1", "emoji-🧪@v2", "wordle@1"];
const STOPS = ["stop", "length", "tool_error", "max_turns", "ümlaut-stop"];
const COMPONENT_NAMES = ["correct", "format", "length_penalty", "répons", "評価", "__proto__", "a b", "x".repeat(40)];

function randomLength(rng: () => number): number {
  const u = rng();
  if (u < 0.15) return 0; // empty sequences are legal (e.g. a rollout cut before any token)
  if (u < 0.25) return 3000 + Math.floor(rng() * 1200); // ~4k-token long rollouts
  return Math.floor(rng() * 300);
}

function randomRow(rng: () => number, i: number): RolloutRow {
  const p = randomLength(rng);
  const c = randomLength(rng);
  const promptIds = new Int32Array(p);
  for (let j = 0; j < p; j++) promptIds[j] = Math.floor(rng() * 200_000);
  const completionIds = new Int32Array(c);
  const completionMask = new Uint8Array(c);
  const samplerLogprobs = new Float32Array(c);
  for (let j = 0; j < c; j++) {
    completionIds[j] = Math.floor(rng() * 200_000);
    completionMask[j] = rng() < 0.8 ? 1 : 0;
    samplerLogprobs[j] = -rng() * 12;
  }
  const components: [string, number][] = [];
  for (const name of COMPONENT_NAMES) if (rng() < 0.3) components.push([name, rng() * 2 - 1]);
  const v = Math.floor(rng() * 50);
  return {
    taskId: `task-${Math.floor(rng() * 1e6)}`,
    groupId: `grp-${i >> 2}-é`,
    env: ENVS[Math.floor(rng() * ENVS.length)]!,
    exampleId: rng() < 0.1 ? "" : `ex/${Math.floor(rng() * 1e4)}`,
    promptIds,
    completionIds,
    completionMask,
    samplerLogprobs,
    policyVersionMin: v,
    policyVersionMax: v + Math.floor(rng() * 3),
    reward: rng() * 4 - 2,
    advantage: rng() * 2 - 1,
    rewardComponents: Object.fromEntries(components),
    isTruncated: rng() < 0.2,
    stopReason: STOPS[Math.floor(rng() * STOPS.length)]!,
    numTurns: 1 + Math.floor(rng() * 5),
    generateMs: rng() * 60_000,
    scoreMs: rng() * 500,
    step: Math.floor(rng() * 10_000),
  };
}

/** What a row looks like after a trip through Float32 columns. */
function onWire(r: RolloutRow): RolloutRow {
  return {
    ...r,
    reward: Math.fround(r.reward),
    advantage: Math.fround(r.advantage),
    rewardComponents: Object.fromEntries(Object.entries(r.rewardComponents).map(([k, v]) => [k, Math.fround(v)])),
  };
}

const META: RolloutBatchMetaInput = { run: "run-ü", producer: "reward-0", createdAt: "2025-01-02T03:04:05.000Z" };

function rowsOf(n: number, seed: number): RolloutRow[] {
  const rng = mulberry32(seed);
  return Array.from({ length: n }, (_, i) => randomRow(rng, i));
}

function expectBatchError(fn: () => unknown, pattern: RegExp, where: { column?: string; row?: number } = {}): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof RolloutBatchError, `expected RolloutBatchError, got ${String(e)}`);
    assert.match(e.message, pattern);
    if ("column" in where) assert.equal(e.column, where.column);
    if ("row" in where) assert.equal(e.row, where.row);
    return true;
  });
}

describe("arrow codec round trip", () => {
  for (const seed of [1, 2, 3]) {
    test(`randomised batches survive encode/decode (seed ${seed})`, () => {
      const rng = mulberry32(seed * 7919);
      for (let b = 0; b < 25; b++) {
        const n = b === 0 ? 0 : Math.floor(rng() * 40);
        const rows = Array.from({ length: n }, (_, i) => randomRow(rng, i));
        const meta = { ...META, step: b, note: `batch ${b} — ✓`, ratio: 0.125 };
        const bytes = encodeRolloutBatch(rows, meta);
        const out = decodeRolloutBatch(bytes);
        assert.deepEqual(out.meta, { ...meta, schemaVersion: ROLLOUT_SCHEMA_VERSION });
        assert.equal(out.rows.length, n);
        assert.deepStrictEqual(out.rows, rows.map(onWire));
      }
    });
  }

  test("zero rows encode to a valid, decodable batch", () => {
    const out = decodeRolloutBatch(encodeRolloutBatch([], META));
    assert.deepEqual(out.rows, []);
    assert.equal(out.meta.run, META.run);
    assert.equal(out.meta.schemaVersion, ROLLOUT_SCHEMA_VERSION);
  });

  test("misaligned input (as JetStream delivers it) decodes to the same rows, at every offset", () => {
    const rows = rowsOf(20, 11);
    const bytes = encodeRolloutBatch(rows, META);
    for (let shift = 1; shift < 8; shift++) {
      const big = new Uint8Array(bytes.byteLength + 16);
      big.set(bytes, shift);
      const view = big.subarray(shift, shift + bytes.byteLength);
      assert.notEqual(view.byteOffset % 8, 0);
      assert.deepStrictEqual(decodeRolloutBatch(view).rows, rows.map(onWire));
    }
  });

  test("aligned input is decoded zero-copy: token arrays are views into the message bytes", () => {
    const rows = rowsOf(8, 12).filter((r) => r.completionIds.length > 0);
    const bytes = encodeRolloutBatch(rows, META);
    assert.equal(bytes.byteOffset % 8, 0);
    const out = decodeRolloutBatch(bytes);
    for (const r of out.rows) {
      assert.equal(r.completionIds.buffer, bytes.buffer);
      assert.equal(r.samplerLogprobs.buffer, bytes.buffer);
    }
  });

  test("a stream of several record batches decodes to all rows in order", () => {
    const rows = rowsOf(30, 13);
    const table = tableFromIPC(encodeRolloutBatch(rows, META));
    const split = new Table(table.schema, [...table.slice(0, 11).batches, ...table.slice(11).batches]);
    assert.equal(split.batches.length, 2);
    const out = decodeRolloutBatch(tableToIPC(split, "stream"));
    assert.deepStrictEqual(out.rows, rows.map(onWire));
  });

  test("a 256 x 1024-token batch encodes and decodes in milliseconds (column-wise build)", () => {
    const rows: RolloutRow[] = Array.from({ length: 256 }, (_, i) => ({
      ...randomRow(mulberry32(i), i),
      promptIds: new Int32Array(128).fill(i),
      completionIds: new Int32Array(896).fill(i + 1),
      completionMask: new Uint8Array(896).fill(1),
      samplerLogprobs: new Float32Array(896).fill(-0.5),
    }));
    const times = (fn: () => void): number => {
      const t: number[] = [];
      for (let k = 0; k < 7; k++) {
        const s = performance.now();
        fn();
        t.push(performance.now() - s);
      }
      return t.sort((a, b) => a - b)[3]!;
    };
    let bytes: Uint8Array = new Uint8Array();
    const enc = times(() => void (bytes = encodeRolloutBatch(rows, META)));
    const dec = times(() => void decodeRolloutBatch(bytes));
    // Typical: 3-6 ms each. A per-element Arrow builder takes 10x+ longer; the bound leaves room for a busy box.
    assert.ok(enc < 60, `encode median ${enc.toFixed(1)} ms`);
    assert.ok(dec < 60, `decode median ${dec.toFixed(1)} ms`);
    assert.ok(bytes.byteLength > 256 * (128 * 4 + 896 * 9));
  });
});

describe("encode refuses to put a bad batch on the wire", () => {
  const good = (): RolloutRow => rowsOf(1, 21)[0]!;
  const withCompletion = (n: number): RolloutRow => ({
    ...good(),
    completionIds: new Int32Array(n).fill(7),
    completionMask: new Uint8Array(n).fill(1),
    samplerLogprobs: new Float32Array(n).fill(-1),
  });
  const cases: [string, (r: RolloutRow) => RolloutRow, RegExp, string][] = [
    ["NaN reward", (r) => ({ ...r, reward: NaN }), /reward.*NaN/, "reward"],
    ["Infinite advantage", (r) => ({ ...r, advantage: -Infinity }), /not a finite Float32/, "advantage"],
    ["reward beyond Float32 range", (r) => ({ ...r, reward: 1e39 }), /not a finite Float32/, "reward"],
    ["negative completion id", (r) => ({ ...withCompletion(5), completionIds: Int32Array.from([1, 2, -3, 4, 5]) }), /token id -3 at position 2 is negative/, "completion_ids"],
    ["negative prompt id", (r) => ({ ...r, promptIds: Int32Array.from([0, -1]) }), /negative/, "prompt_ids"],
    ["mask value 2", (r) => ({ ...withCompletion(4), completionMask: Uint8Array.from([1, 0, 2, 1]) }), /value 2 at position 2 is not 0 or 1/, "completion_mask"],
    ["mask shorter than completion", (r) => ({ ...withCompletion(4), completionMask: new Uint8Array(3) }), /length 3 != completion_ids length 4/, "completion_mask"],
    ["logprobs longer than completion", (r) => ({ ...withCompletion(4), samplerLogprobs: new Float32Array(5) }), /length 5 != completion_ids length 4/, "sampler_logprobs"],
    ["NaN logprob", (r) => ({ ...withCompletion(3), samplerLogprobs: Float32Array.from([-1, NaN, -2]) }), /position 1 is not finite/, "sampler_logprobs"],
    ["plain array of ids", (r) => ({ ...r, promptIds: [1, 2] as unknown as Int32Array }), /expected an Int32Array, got Array/, "prompt_ids"],
    ["empty task id", (r) => ({ ...r, taskId: "" }), /must not be empty/, "task_id"],
    ["env without version", (r) => ({ ...r, env: "gsm8k" }), /name@version/, "env"],
    ["policy version min > max", (r) => ({ ...r, policyVersionMin: 5, policyVersionMax: 4 }), /5 > policy_version_max 4/, "policy_version_min"],
    ["fractional step", (r) => ({ ...r, step: 1.5 }), /integer/, "step"],
    ["negative generate time", (r) => ({ ...r, generateMs: -1 }), />= 0/, "generate_ms"],
    ["NaN reward component", (r) => ({ ...r, rewardComponents: { format: NaN } }), /"format" = NaN/, "reward_components"],
    ["empty reward component name", (r) => ({ ...r, rewardComponents: { "": 1 } }), /empty component name/, "reward_components"],
    ["non-boolean truncation flag", (r) => ({ ...r, isTruncated: 1 as unknown as boolean }), /boolean/, "is_truncated"],
    ["empty stop reason", (r) => ({ ...r, stopReason: "" }), /must not be empty/, "stop_reason"],
  ];
  for (const [name, mutate, pattern, column] of cases) {
    test(name, () => {
      const rows = [good(), good(), mutate(good())];
      expectBatchError(() => encodeRolloutBatch(rows, META), pattern, { column, row: 2 });
    });
  }

  test("element scans find an offender at any position, length and byte offset (word-wise fast paths)", () => {
    const base = good();
    for (let offset = 0; offset < 8; offset++) {
      for (let n = 0; n <= 13; n++) {
        const ids = new Int32Array(n + offset).fill(3).subarray(offset);
        const mask = new Uint8Array(n + offset).fill(1).subarray(offset);
        const lps = new Float32Array(n + offset).fill(-0.5).subarray(offset);
        const row: RolloutRow = { ...base, completionIds: ids, completionMask: mask, samplerLogprobs: lps };
        validateRolloutRows([row]);
        for (let p = 0; p < n; p++) {
          mask[p] = 2;
          expectBatchError(() => validateRolloutRows([row]), new RegExp(`value 2 at position ${p} is not 0 or 1`));
          mask[p] = 0;
          ids[p] = -1;
          expectBatchError(() => validateRolloutRows([row]), new RegExp(`token id -1 at position ${p} is negative`));
          ids[p] = 3;
          lps[p] = p % 2 ? NaN : Infinity;
          expectBatchError(() => validateRolloutRows([row]), new RegExp(`position ${p} is not finite`));
          lps[p] = -0.5;
        }
      }
    }
  });

  test("metadata is checked: missing run, reserved keys, wrong schema version, non-finite numbers", () => {
    const rows = [good()];
    expectBatchError(() => encodeRolloutBatch(rows, { ...META, run: undefined } as unknown as RolloutBatchMetaInput), /"run": expected a string/);
    expectBatchError(() => encodeRolloutBatch(rows, { ...META, run: "" }), /"run" must not be empty/);
    expectBatchError(() => encodeRolloutBatch(rows, { ...META, "rs.rows": 5 }), /reserved/);
    expectBatchError(() => encodeRolloutBatch(rows, { ...META, schemaVersion: ROLLOUT_SCHEMA_VERSION + 1 }), /schemaVersion/);
    expectBatchError(() => encodeRolloutBatch(rows, { ...META, lag: NaN }), /"lag": NaN is not a finite number/);
    expectBatchError(() => encodeRolloutBatch(rows, { ...META, obj: {} as unknown as string }), /"obj": expected a string or number/);
  });

  test("not an array of rows", () => {
    expectBatchError(() => encodeRolloutBatch({} as unknown as RolloutRow[], META), /expected an array of rows/);
    expectBatchError(() => validateRolloutRows([null as unknown as RolloutRow]), /row 0: expected an object/, { row: 0 });
  });
});

describe("decode rejects bad messages with a reason", () => {
  const rows = rowsOf(6, 31).map((r) => ({
    ...r,
    completionIds: Int32Array.from([5, 6, 7]),
    completionMask: Uint8Array.from([1, 1, 0]),
    samplerLogprobs: Float32Array.from([-0.1, -0.2, -0.3]),
  }));
  const valid = encodeRolloutBatch(rows, META);

  test("bytes that are not Arrow IPC", () => {
    expectBatchError(() => decodeRolloutBatch(new Uint8Array(0)), /not an Arrow IPC stream: only 0 bytes/);
    expectBatchError(() => decodeRolloutBatch(new TextEncoder().encode('{"json":"is not arrow at all"}')), /not an Arrow IPC stream: missing the 0xFFFFFFFF/);
    expectBatchError(() => decodeRolloutBatch("hello" as unknown as Uint8Array), /expected bytes/);
    // Right framing, garbage inside.
    const junk = new Uint8Array(64).fill(0x41);
    junk.set([0xff, 0xff, 0xff, 0xff, 0x20, 0, 0, 0], 0);
    junk.set([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], 56);
    expectBatchError(() => decodeRolloutBatch(junk), /not a valid Arrow IPC stream/);
  });

  test("truncated streams: cut anywhere, cut at a message boundary, or the end marker dropped", () => {
    for (const cut of [16, 100, Math.floor(valid.byteLength / 2), valid.byteLength - 9, valid.byteLength - 1]) {
      expectBatchError(() => decodeRolloutBatch(valid.subarray(0, cut)), /truncated|not a valid Arrow IPC stream/);
    }
    expectBatchError(() => decodeRolloutBatch(valid.subarray(0, valid.byteLength - 8)), /truncated Arrow IPC stream/);
    // A reader that lost the last record batch but kept the schema would see fewer rows: metadata catches it.
    const table = tableFromIPC(valid);
    const short = tableToIPC(new Table(table.schema, table.slice(0, 2).batches), "stream");
    expectBatchError(() => decodeRolloutBatch(short), /truncated batch: 2 rows read, metadata "rs.rows" says 6/);
  });

  function withMetadata(edit: (m: Map<string, string>) => void): Uint8Array {
    const table = tableFromIPC(valid);
    const md = new Map(table.schema.metadata);
    edit(md);
    const schema = new Schema(table.schema.fields, md);
    return tableToIPC(new Table(schema, table.batches.map((b) => new RecordBatch(schema, b.data))), "stream");
  }

  test("schema version mismatch and missing metadata", () => {
    expectBatchError(() => decodeRolloutBatch(withMetadata((m) => m.set("schemaVersion", "2"))), /schema version "2" is not supported \(this build reads version 1\)/);
    expectBatchError(() => decodeRolloutBatch(withMetadata((m) => m.delete("schemaVersion"))), /no "schemaVersion"/);
    expectBatchError(() => decodeRolloutBatch(withMetadata((m) => m.delete("run"))), /"run" is missing/);
    expectBatchError(() => decodeRolloutBatch(withMetadata((m) => m.delete("rs.rows"))), /"rs.rows" is missing/);
    expectBatchError(() => decodeRolloutBatch(withMetadata((m) => m.set("rs.numeric", "{oops"))), /"rs.numeric" is not a JSON array/);
  });

  /** The valid batch with one column's Data replaced (schema field type follows the new data). */
  function withColumn(name: string, data: Data | null): Uint8Array {
    const table = tableFromIPC(valid);
    const fields: Field[] = [];
    const children: Data[] = [];
    table.schema.fields.forEach((f, k) => {
      if (f.name !== name) {
        fields.push(f);
        children.push(table.batches[0]!.data.children[k]!);
      } else if (data) {
        fields.push(new Field(name, data.type, true));
        children.push(data);
      }
    });
    const schema = new Schema(fields, table.schema.metadata);
    const batch = new RecordBatch(schema, makeData({ type: new Struct(fields), length: table.numRows, nullCount: 0, children }));
    return tableToIPC(new Table(batch), "stream");
  }

  test("missing column", () => {
    expectBatchError(() => decodeRolloutBatch(withColumn("advantage", null)), /missing column "advantage" \(Float32\)/, { column: "advantage" });
  });

  test("wrong-typed column", () => {
    const f64 = makeData({ type: new Float64(), data: new Float64Array(rows.length), length: rows.length, nullCount: 0 });
    expectBatchError(() => decodeRolloutBatch(withColumn("reward", f64)), /column "reward" has type Float64, expected Float32/, { column: "reward" });
    const ints = makeVector(Int32Array.from(rows.map((_, i) => i))).data[0]!;
    expectBatchError(() => decodeRolloutBatch(withColumn("task_id", ints)), /column "task_id" has type Int32, expected Utf8/, { column: "task_id" });
  });

  test("nulls where none are allowed, at the top level and inside lists", () => {
    const bitmap = new Uint8Array([0b11110111]); // row 3 null
    const nullable = makeData({ type: new Float32(), data: new Float32Array(rows.length), length: rows.length, nullBitmap: bitmap, nullCount: 1 });
    expectBatchError(() => decodeRolloutBatch(withColumn("reward", nullable)), /row 3, column "reward": null value/, { column: "reward", row: 3 });

    const table = tableFromIPC(valid);
    const k = table.schema.fields.findIndex((f) => f.name === "completion_ids");
    const list = table.batches[0]!.data.children[k]! as Data<List<Int32>>;
    const child = list.children[0]! as Data<Int32>;
    const childBitmap = new Uint8Array(Math.ceil(child.length / 8)).fill(0xff);
    childBitmap[0] = 0b11111101;
    const nullChild = makeData({ type: child.type, data: child.values, length: child.length, nullBitmap: childBitmap, nullCount: 1 });
    const listWithNull = makeData({ type: list.type, length: list.length, nullCount: 0, valueOffsets: list.valueOffsets, child: nullChild });
    expectBatchError(() => decodeRolloutBatch(withColumn("completion_ids", listWithNull)), /column "completion_ids": null inside a list/, { column: "completion_ids" });
  });

  // Rows that break the value rules can only reach the wire through the unchecked encoder (fault tests).
  const bad = (edit: (r: RolloutRow) => RolloutRow, at = 4): Uint8Array =>
    encodeRolloutBatchUnchecked(
      rows.map((r, i) => (i === at ? edit(r) : r)),
      META,
    );
  const cases: [string, (r: RolloutRow) => RolloutRow, RegExp, string][] = [
    ["NaN reward", (r) => ({ ...r, reward: NaN }), /row 4, column "reward": is NaN/, "reward"],
    ["NaN advantage", (r) => ({ ...r, advantage: NaN }), /row 4, column "advantage": is NaN/, "advantage"],
    ["negative token id", (r) => ({ ...r, completionIds: Int32Array.from([5, -6, 7]) }), /token id -6 at position 1 is negative/, "completion_ids"],
    ["negative prompt token id", (r) => ({ ...r, promptIds: Int32Array.from([-1]) }), /token id -1 at position 0/, "prompt_ids"],
    ["mask value not 0/1", (r) => ({ ...r, completionMask: Uint8Array.from([1, 255, 0]) }), /value 255 at position 1 is not 0 or 1/, "completion_mask"],
    ["mask length != completion length", (r) => ({ ...r, completionMask: Uint8Array.from([1, 1]) }), /length 2 != completion_ids length 3/, "completion_mask"],
    ["logprobs length != completion length", (r) => ({ ...r, samplerLogprobs: Float32Array.from([-1, -1, -1, -1]) }), /length 4 != completion_ids length 3/, "sampler_logprobs"],
    ["infinite logprob", (r) => ({ ...r, samplerLogprobs: Float32Array.from([-1, -Infinity, -1]) }), /position 1 is not finite/, "sampler_logprobs"],
  ];
  for (const [name, edit, pattern, column] of cases) {
    test(`row rule: ${name}`, () => {
      expectBatchError(() => decodeRolloutBatch(bad(edit)), pattern, { column, row: 4 });
    });
  }

  test("corrupt offsets and dictionary indices are caught, not read out of bounds", () => {
    const table = tableFromIPC(valid);
    const k = table.schema.fields.findIndex((f) => f.name === "completion_ids");
    const list = table.batches[0]!.data.children[k]! as Data<List<Int32>>;
    const offsets = Int32Array.from(list.valueOffsets);
    offsets[3] = offsets[2]! - 1;
    const decreasing = makeData({ type: list.type, length: list.length, nullCount: 0, valueOffsets: offsets, child: list.children[0]! as Data<Int32> });
    expectBatchError(() => decodeRolloutBatch(withColumn("completion_ids", decreasing)), /row 2, column "completion_ids": offsets decrease/);
    const past = Int32Array.from(list.valueOffsets);
    past[list.length] = 10_000; // the IPC offsets buffer is padded: the last USED offset is at [length]
    const overrun = makeData({ type: list.type, length: list.length, nullCount: 0, valueOffsets: past, child: list.children[0]! as Data<Int32> });
    expectBatchError(() => decodeRolloutBatch(withColumn("completion_ids", overrun)), /column "completion_ids": (values buffer too short|offsets run past the values)/);

    const s = table.schema.fields.findIndex((f) => f.name === "stop_reason");
    const stop = table.batches[0]!.data.children[s]! as Data<Dictionary<Utf8, Int32>>;
    const idx = Int32Array.from(stop.values.subarray(0, stop.length));
    idx[5] = 99;
    const badDict = makeData({ type: stop.type, length: stop.length, nullCount: 0, data: idx, dictionary: stop.dictionary! });
    expectBatchError(() => decodeRolloutBatch(withColumn("stop_reason", badDict)), /row 5, column "stop_reason": dictionary index 99 out of range/, {
      column: "stop_reason",
      row: 5,
    });
  });

  test("decoding never mutates or half-returns: the valid batch still decodes after all the failures", () => {
    assert.equal(decodeRolloutBatch(valid).rows.length, rows.length);
  });
});

test("reward components keep their order and unusual names", () => {
  const row: RolloutRow = { ...rowsOf(1, 41)[0]!, rewardComponents: Object.fromEntries([["__proto__", 0.5], ["z", 1], ["a", -1], ["🙂", 0.25]]) };
  const out = decodeRolloutBatch(encodeRolloutBatch([row], META)).rows[0]!;
  assert.deepEqual(Object.keys(out.rewardComponents), ["__proto__", "z", "a", "🙂"]);
  assert.equal(Object.getOwnPropertyDescriptor(out.rewardComponents, "__proto__")?.value, 0.5);
  assert.equal(Object.getPrototypeOf(out.rewardComponents), Object.prototype);
});

test("float columns are Float32 on the wire, timings Float64", () => {
  const row: RolloutRow = { ...rowsOf(1, 42)[0]!, reward: 0.1, advantage: 1 / 3, generateMs: 123456.789012, scoreMs: 0.000123 };
  const out = decodeRolloutBatch(encodeRolloutBatch([row], META)).rows[0]!;
  assert.equal(out.reward, Math.fround(0.1));
  assert.equal(out.advantage, Math.fround(1 / 3));
  assert.equal(out.generateMs, 123456.789012);
  assert.equal(out.scoreMs, 0.000123);
});
