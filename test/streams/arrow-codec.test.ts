import { Buffer } from "node:buffer";
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import {
  type Dictionary,
  Field,
  Float32,
  Float64,
  type Int32,
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
  vectorFromArray,
  type Data,
  type Map_,
} from "apache-arrow";
import { decodeRolloutBatch, encodeRolloutBatch, encodeRolloutBatchUnchecked, RolloutBatchError, validateRolloutRows } from "../../streams/arrow-codec.js";
import {
  describeRolloutSchema,
  ROLLOUT_FIELDS,
  ROLLOUT_FIELDS_V1,
  ROLLOUT_SCHEMA_VERSION,
  type RolloutBatchMetaInput,
  type RolloutMessage,
  type RolloutRow,
} from "../../streams/rollout-schema.js";
import { mulberry32 } from "../helpers/rng.js";
import type { VersionSpan } from "../../streams/version-spans.js";

const ENVS = ["gsm8k@1", "math-500@2.1.0", "código@0.3", "数学推理@1", "emoji-🧪@v2", "wordle@1"];
const STOPS = ["stop", "length", "tool_error", "max_turns", "ümlaut-stop"];
const COMPONENT_NAMES = ["correct", "format", "length_penalty", "répons", "評価", "__proto__", "a b", "x".repeat(40)];
const TEXTS = [
  "",
  "What is 2 + 2?",
  "The answer is <answer>4</answer>.",
  "línea 1\nlínea 2\t✓",
  "数学推理：答案是四。",
  "emoji 🧪👩‍🔬 mixed",
  '{"json": [1, 2]}',
  "x".repeat(700),
];
const TOOL_NAMES = ["python", "search", "计算器", "sandbox.exec"];

function pick<T>(rng: () => number, xs: readonly T[]): T {
  return xs[Math.floor(rng() * xs.length)]!;
}

/** A transcript: empty, or system?/user then assistant turns, some calling tools (name and call id kept). */
function randomMessages(rng: () => number): RolloutMessage[] {
  if (rng() < 0.15) return [];
  const out: RolloutMessage[] = [];
  if (rng() < 0.5) out.push({ role: "system", content: pick(rng, TEXTS) });
  out.push({ role: "user", content: pick(rng, TEXTS) });
  const turns = 1 + Math.floor(rng() * 3);
  for (let t = 0; t < turns; t++) {
    out.push({ role: "assistant", content: pick(rng, TEXTS) });
    if (t < turns - 1) {
      const m: RolloutMessage = { role: "tool", content: pick(rng, TEXTS) };
      if (rng() < 0.8) m.name = pick(rng, TOOL_NAMES);
      if (rng() < 0.5) m.toolCallId = `call_${Math.floor(rng() * 1e6)}`;
      out.push(m);
    }
  }
  return out;
}

function randomTurnOffsets(rng: () => number, completion: number): Int32Array {
  const k = Math.floor(rng() * 4);
  return Int32Array.from(Array.from({ length: k }, () => Math.floor(rng() * (completion + 1))).sort((a, b) => a - b));
}

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
  const metrics: [string, number][] = [];
  for (const name of COMPONENT_NAMES) if (rng() < 0.3) metrics.push([`m_${name}`, (rng() - 0.5) * 1e6]);
  const v = Math.floor(rng() * 50);
  const dv = Math.floor(rng() * 3);
  return {
    taskId: `task-${Math.floor(rng() * 1e6)}`,
    groupId: `grp-${i >> 2}-é`,
    env: ENVS[Math.floor(rng() * ENVS.length)]!,
    exampleId: rng() < 0.1 ? "" : `ex/${Math.floor(rng() * 1e4)}`,
    exampleIndex: Math.floor(rng() * 1e4),
    promptIds,
    completionIds,
    completionMask,
    samplerLogprobs,
    turnOffsets: randomTurnOffsets(rng, c),
    policyVersionMin: v,
    policyVersionMax: v + dv,
    versionSpans: randomSpans(rng, completionMask, v, v + dv),
    reward: rng() * 4 - 2,
    advantage: rng() * 2 - 1,
    rewardComponents: Object.fromEntries(components),
    metrics: Object.fromEntries(metrics),
    isTruncated: rng() < 0.2,
    stopReason: STOPS[Math.floor(rng() * STOPS.length)]!,
    numTurns: 1 + Math.floor(rng() * 5),
    generateMs: rng() * 60_000,
    envMs: rng() < 0.2 ? 0 : rng() * 5_000,
    scoreMs: rng() * 500,
    step: Math.floor(rng() * 10_000),
    messages: randomMessages(rng),
    stateJson:
      rng() < 0.2 ? "{}" : JSON.stringify({ answer: pick(rng, TEXTS), turn: Math.floor(rng() * 5), nested: { ok: rng() < 0.5, list: [1, "two", null] } }),
    errors: rng() < 0.7 ? [] : Array.from({ length: 1 + Math.floor(rng() * 2) }, () => `tool error: ${pick(rng, TEXTS)}`),
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
    const rows = rowsOf(8, 12)
      .filter((r) => r.completionIds.length > 0)
      .map((r) => ({ ...r, turnOffsets: Int32Array.of(0, r.completionIds.length) }));
    const bytes = encodeRolloutBatch(rows, META);
    assert.equal(bytes.byteOffset % 8, 0);
    const out = decodeRolloutBatch(bytes);
    for (const r of out.rows) {
      assert.equal(r.completionIds.buffer, bytes.buffer);
      assert.equal(r.samplerLogprobs.buffer, bytes.buffer);
      assert.equal(r.turnOffsets.buffer, bytes.buffer);
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
      turnOffsets: Int32Array.of(0, 300),
      promptIds: new Int32Array(128).fill(i),
      completionIds: new Int32Array(896).fill(i + 1),
      completionMask: new Uint8Array(896).fill(1),
      samplerLogprobs: new Float32Array(896).fill(-0.5),
      policyVersionMin: 7,
      policyVersionMax: 8,
      versionSpans: [
        { version: 7, start: 0, end: 300 },
        { version: 8, start: 300, end: 896 },
      ],
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
    turnOffsets: Int32Array.of(0),
    versionSpans: [],
  });
  const spanned = (spans: RolloutRow["versionSpans"], min = 3, max = 4): RolloutRow => ({
    ...withCompletion(4),
    policyVersionMin: min,
    policyVersionMax: max,
    versionSpans: spans,
  });
  const cases: [string, (r: RolloutRow) => RolloutRow, RegExp, string][] = [
    ["NaN reward", (r) => ({ ...r, reward: NaN }), /reward.*NaN/, "reward"],
    ["Infinite advantage", (r) => ({ ...r, advantage: -Infinity }), /not a finite Float32/, "advantage"],
    ["reward beyond Float32 range", (r) => ({ ...r, reward: 1e39 }), /not a finite Float32/, "reward"],
    [
      "negative completion id",
      (_r) => ({ ...withCompletion(5), completionIds: Int32Array.from([1, 2, -3, 4, 5]) }),
      /token id -3 at position 2 is negative/,
      "completion_ids",
    ],
    ["negative prompt id", (r) => ({ ...r, promptIds: Int32Array.from([0, -1]) }), /negative/, "prompt_ids"],
    [
      "mask value 2",
      (_r) => ({ ...withCompletion(4), completionMask: Uint8Array.from([1, 0, 2, 1]) }),
      /value 2 at position 2 is not 0 or 1/,
      "completion_mask",
    ],
    [
      "mask shorter than completion",
      (_r) => ({ ...withCompletion(4), completionMask: new Uint8Array(3) }),
      /length 3 != completion_ids length 4/,
      "completion_mask",
    ],
    [
      "logprobs longer than completion",
      (_r) => ({ ...withCompletion(4), samplerLogprobs: new Float32Array(5) }),
      /length 5 != completion_ids length 4/,
      "sampler_logprobs",
    ],
    ["NaN logprob", (_r) => ({ ...withCompletion(3), samplerLogprobs: Float32Array.from([-1, NaN, -2]) }), /position 1 is not finite/, "sampler_logprobs"],
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
    ["negative example index", (r) => ({ ...r, exampleIndex: -1 }), /integer in \[0, /, "example_index"],
    ["fractional example index", (r) => ({ ...r, exampleIndex: 0.5 }), /integer/, "example_index"],
    ["negative env time", (r) => ({ ...r, envMs: -0.5 }), />= 0/, "env_ms"],
    ["NaN env time", (r) => ({ ...r, envMs: NaN }), /finite number >= 0, got NaN/, "env_ms"],
    ["NaN metric", (r) => ({ ...r, metrics: { len: NaN } }), /metric "len" = NaN is not a finite number/, "metrics"],
    ["infinite metric", (r) => ({ ...r, metrics: { ok: 1, len: Infinity } }), /metric "len" = Infinity/, "metrics"],
    ["string metric", (r) => ({ ...r, metrics: { len: "3" as unknown as number } }), /metric "len" = 3 is not a finite number/, "metrics"],
    ["empty metric name", (r) => ({ ...r, metrics: { "": 1 } }), /empty metric name/, "metrics"],
    ["metrics as an array", (r) => ({ ...r, metrics: [1] as unknown as Record<string, number> }), /expected an object of name -> number, got Array/, "metrics"],
    [
      "turn offsets as a plain array",
      (_r) => ({ ...withCompletion(4), turnOffsets: [0] as unknown as Int32Array }),
      /expected an Int32Array, got Array/,
      "turn_offsets",
    ],
    ["negative turn offset", (_r) => ({ ...withCompletion(4), turnOffsets: Int32Array.of(-1, 2) }), /offset -1 at position 0 is negative/, "turn_offsets"],
    [
      "decreasing turn offsets",
      (_r) => ({ ...withCompletion(4), turnOffsets: Int32Array.of(0, 3, 2) }),
      /offset 2 at position 2 is less than the one before it \(3\)/,
      "turn_offsets",
    ],
    [
      "turn offset past the completion",
      (_r) => ({ ...withCompletion(4), turnOffsets: Int32Array.of(0, 5) }),
      /offset 5 at position 1 is past the completion \(length 4\)/,
      "turn_offsets",
    ],
    ["messages not an array", (r) => ({ ...r, messages: {} as unknown as RolloutMessage[] }), /expected an array of messages, got Object/, "messages"],
    [
      "null message",
      (r) => ({ ...r, messages: [{ role: "user", content: "hi" }, null as unknown as RolloutMessage] }),
      /message 1: expected an object, got null/,
      "messages",
    ],
    [
      "unknown role",
      (r) => ({ ...r, messages: [{ role: "robot" as "user", content: "beep" }] }),
      /message 0: role "robot" is not one of system, user, assistant, tool/,
      "messages",
    ],
    ["missing role", (r) => ({ ...r, messages: [{ content: "x" } as RolloutMessage] }), /message 0: role undefined is not one of/, "messages"],
    [
      "non-string content",
      (r) => ({ ...r, messages: [{ role: "user", content: 42 as unknown as string }] }),
      /message 0: content: expected a string, got number/,
      "messages",
    ],
    [
      "non-string tool name",
      (r) => ({ ...r, messages: [{ role: "tool", content: "1", name: 7 as unknown as string }] }),
      /message 0: name: expected a string or absent, got number/,
      "messages",
    ],
    [
      "non-string tool call id",
      (r) => ({ ...r, messages: [{ role: "assistant", content: "1", toolCallId: null as unknown as string }] }),
      /message 0: toolCallId: expected a string or absent, got null/,
      "messages",
    ],
    [
      "version spans overlap",
      () =>
        spanned([
          { version: 3, start: 0, end: 3 },
          { version: 4, start: 2, end: 4 },
        ]),
      /span 1 \[2, 4\) is empty, overlaps/,
      "policy_versions",
    ],
    [
      "version span past the completion",
      () =>
        spanned([
          { version: 3, start: 0, end: 2 },
          { version: 4, start: 2, end: 5 },
        ]),
      /passes the completion's 4 tokens/,
      "policy_versions",
    ],
    [
      "version span outside min..max",
      () =>
        spanned([
          { version: 3, start: 0, end: 2 },
          { version: 5, start: 2, end: 4 },
        ]),
      /version 5, outside policy versions 3..4/,
      "policy_versions",
    ],
    ["version spans miss max", () => spanned([{ version: 3, start: 0, end: 4 }]), /spans cover versions 3..3, but the row says 3..4/, "policy_versions"],
    [
      "sampled token in no span",
      () =>
        spanned([
          { version: 3, start: 0, end: 2 },
          { version: 4, start: 3, end: 4 },
        ]),
      /sampled token 2 is in no version span/,
      "policy_versions",
    ],
    ["state not JSON", (r) => ({ ...r, stateJson: "{answer: 4}" }), /"state": not valid JSON/, "state"],
    ["state a JSON array", (r) => ({ ...r, stateJson: "[1,2]" }), /must be a JSON object, got an array/, "state"],
    ["state JSON null", (r) => ({ ...r, stateJson: "null" }), /must be a JSON object, got null/, "state"],
    ["state a JSON string", (r) => ({ ...r, stateJson: '"{}"' }), /must be a JSON object, got string/, "state"],
    ["state an object, not its JSON", (r) => ({ ...r, stateJson: {} as unknown as string }), /expected a JSON string, got Object/, "state"],
    ["errors not an array", (r) => ({ ...r, errors: "boom" as unknown as string[] }), /expected an array of strings, got string/, "errors"],
    ["non-string error", (r) => ({ ...r, errors: ["ok", { message: "boom" } as unknown as string] }), /error 1: expected a string, got Object/, "errors"],
  ];
  for (const [name, mutate, pattern, column] of cases) {
    test(name, () => {
      const rows = [good(), good(), mutate(good())];
      expectBatchError(() => encodeRolloutBatch(rows, META), pattern, { column, row: 2 });
    });
  }

  // Positive controls: the value next to each rule's edge is accepted and survives the round trip.
  const accepted: [string, (r: RolloutRow) => RolloutRow][] = [
    [
      "two version spans, a weight update after token 2",
      () =>
        spanned([
          { version: 3, start: 0, end: 2 },
          { version: 4, start: 2, end: 4 },
        ]),
    ],
    [
      "a gap in the spans where the mask is 0",
      () => ({
        ...spanned([
          { version: 3, start: 0, end: 2 },
          { version: 4, start: 3, end: 4 },
        ]),
        completionMask: Uint8Array.from([1, 1, 0, 1]),
      }),
    ],
    ["example index INT32_MAX", (r) => ({ ...r, exampleIndex: 2147483647 })],
    ["env time 0", (r) => ({ ...r, envMs: 0 })],
    ["huge but finite Float64 metric (beyond Float32)", (r) => ({ ...r, metrics: { big: 1e300, tiny: -5e-324, zero: -0 } })],
    ["empty metrics and components", (r) => ({ ...r, metrics: {}, rewardComponents: {} })],
    ["turn offsets repeating, at 0 and at the completion length", (_r) => ({ ...withCompletion(4), turnOffsets: Int32Array.of(0, 0, 2, 4, 4) })],
    ["turn offsets on an empty completion", (_r) => ({ ...withCompletion(0), turnOffsets: Int32Array.of(0) })],
    ["no turn offsets", (r) => ({ ...r, turnOffsets: new Int32Array(0) })],
    [
      "every role, empty content, name and call id present",
      (r) => ({
        ...r,
        messages: [
          { role: "system", content: "" },
          { role: "user", content: "q" },
          { role: "assistant", content: "", toolCallId: "call_1" },
          { role: "tool", content: "4", name: "python", toolCallId: "call_1" },
        ],
      }),
    ],
    ["explicitly undefined name (treated as absent)", (r) => ({ ...r, messages: [{ role: "user", content: "q", name: undefined }] })],
    ["empty transcript", (r) => ({ ...r, messages: [] })],
    ["state {} and a deep object", (r) => ({ ...r, stateJson: ' { "a": { "b": [1, {"c": null}] } } ' })],
    ["empty error strings", (r) => ({ ...r, errors: ["", "x"] })],
  ];

  test("an empty name or tool call id is accepted and means absent (a model may write a nameless tool call)", () => {
    const row: RolloutRow = {
      ...good(),
      messages: [
        { role: "tool", content: 'error: unknown tool ""', name: "" },
        { role: "assistant", content: "1", toolCallId: "" },
      ],
    };
    const out = decodeRolloutBatch(encodeRolloutBatch([row], META)).rows[0]!;
    assert.deepStrictEqual(out.messages, [
      { role: "tool", content: 'error: unknown tool ""' },
      { role: "assistant", content: "1" },
    ]);
  });

  for (const [name, mutate] of accepted) {
    test(`accepted: ${name}`, () => {
      const row = mutate(good());
      const out = decodeRolloutBatch(encodeRolloutBatch([good(), row], META)).rows[1]!;
      const want = onWire(row);
      // undefined optional fields are absent after the trip (the wire spells absent as "").
      want.messages = row.messages.map((m) => Object.fromEntries(Object.entries(m).filter(([, v]) => v !== undefined)) as RolloutMessage);
      assert.deepStrictEqual(out, want);
    });
  }

  test("element scans find an offender at any position, length and byte offset (word-wise fast paths)", () => {
    const base = good();
    for (let offset = 0; offset < 8; offset++) {
      for (let n = 0; n <= 13; n++) {
        const ids = new Int32Array(n + offset).fill(3).subarray(offset);
        const mask = new Uint8Array(n + offset).fill(1).subarray(offset);
        const lps = new Float32Array(n + offset).fill(-0.5).subarray(offset);
        const row: RolloutRow = { ...base, completionIds: ids, completionMask: mask, samplerLogprobs: lps, turnOffsets: new Int32Array(0), versionSpans: [] };
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
    turnOffsets: Int32Array.of(0, 2),
    policyVersionMin: 2,
    policyVersionMax: 3,
    versionSpans: [
      { version: 2, start: 0, end: 1 },
      { version: 3, start: 1, end: 2 },
    ],
    // Every row has a transcript, so the messages column is never empty (the struct tests need children).
    messages: [{ role: "user" as const, content: `question ${r.taskId}` }, ...r.messages],
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
    return tableToIPC(
      new Table(
        schema,
        table.batches.map((b) => new RecordBatch(schema, b.data)),
      ),
      "stream",
    );
  }

  test("schema version mismatch and missing metadata", () => {
    expectBatchError(
      () => decodeRolloutBatch(withMetadata((m) => m.set("schemaVersion", "7"))),
      /schema version 7 is not supported: this reader reads 1, 2 and 3$/,
    );
    expectBatchError(
      () => decodeRolloutBatch(withMetadata((m) => m.set("schemaVersion", "0"))),
      /schema version 0 is not supported: this reader reads 1, 2 and 3/,
    );
    expectBatchError(
      () => decodeRolloutBatch(withMetadata((m) => m.set("schemaVersion", "2.0"))),
      /schema version "2.0" is not supported: this reader reads 1, 2 and 3/,
    );
    expectBatchError(() => decodeRolloutBatch(withMetadata((m) => m.set("schemaVersion", ""))), /schema version "" is not supported/);
    // Positive control: the same edit with the version this build writes changes nothing.
    assert.equal(decodeRolloutBatch(withMetadata((m) => m.set("schemaVersion", String(ROLLOUT_SCHEMA_VERSION)))).rows.length, rows.length);
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
    // A batch that says version 2 must have the version-2 columns (only a version-1 label excuses them).
    expectBatchError(
      () => decodeRolloutBatch(withColumn("messages", null)),
      /missing column "messages" \(List<Struct<\{role:Utf8, content:Utf8, name:Utf8, tool_call_id:Utf8\}>>\)/,
      { column: "messages" },
    );
    expectBatchError(() => decodeRolloutBatch(withColumn("state", null)), /missing column "state" \(Utf8\)/, { column: "state" });
    expectBatchError(() => decodeRolloutBatch(withColumn("env_ms", null)), /missing column "env_ms"/, { column: "env_ms" });
  });

  test("a version-2 batch (no policy_versions) decodes with empty spans; a version-3 one must have them", () => {
    const v2 = (() => {
      const table = tableFromIPC(withColumn("policy_versions", null));
      const md = new Map(table.schema.metadata).set("schemaVersion", "2");
      const schema = new Schema(table.schema.fields, md);
      return tableToIPC(
        new Table(
          schema,
          table.batches.map((b) => new RecordBatch(schema, b.data)),
        ),
        "stream",
      );
    })();
    const out = decodeRolloutBatch(v2);
    assert.equal(out.meta.schemaVersion, 2);
    assert.deepEqual(
      out.rows.map((r) => r.versionSpans),
      rows.map(() => []),
    );
    assert.deepEqual(
      out.rows.map((r) => r.completionIds),
      rows.map((r) => r.completionIds),
    );
    // Control: the same bytes labelled version 3 miss a column the label promises.
    expectBatchError(
      () => decodeRolloutBatch(withColumn("policy_versions", null)),
      /missing column "policy_versions" \(List<Struct<\{version:Int32, start:Int32, end:Int32\}>>\)/,
      {
        column: "policy_versions",
      },
    );
  });

  test("message structs are matched by field name, not only by shape", () => {
    const table = tableFromIPC(valid);
    const k = table.schema.fields.findIndex((f) => f.name === "messages");
    const list = table.batches[0]!.data.children[k]! as Data<List<Struct>>;
    const struct = list.children[0]! as Data<Struct>;
    const f = struct.type.children;
    // Same four Utf8 children, name and content swapped: same shape, wrong meaning.
    const swapped = new Struct([f[0]!, f[2]!, f[1]!, f[3]!]);
    const swappedData = makeData({
      type: swapped,
      length: struct.length,
      nullCount: 0,
      children: [struct.children[0]!, struct.children[2]!, struct.children[1]!, struct.children[3]!],
    });
    const listType = new List(new Field("item", swapped, false));
    const bad = makeData({ type: listType, length: list.length, nullCount: 0, valueOffsets: list.valueOffsets, child: swappedData });
    expectBatchError(
      () => decodeRolloutBatch(withColumn("messages", bad)),
      /column "messages" has type .* expected List<Struct<\{role:Utf8, content:Utf8, name:Utf8, tool_call_id:Utf8\}>>/,
      { column: "messages" },
    );
    // Positive control: the list item may be named anything (writers differ), the struct fields may not.
    const renamedItem = makeData({
      type: new List(new Field("element", struct.type, false)),
      length: list.length,
      nullCount: 0,
      valueOffsets: list.valueOffsets,
      child: struct,
    });
    assert.deepStrictEqual(decodeRolloutBatch(withColumn("messages", renamedItem)).rows, decodeRolloutBatch(valid).rows);
  });

  test("a duplicate metric name is rejected, naming the row", () => {
    const table = tableFromIPC(valid);
    const metrics = table.batches[0]!.data.children[table.schema.fields.findIndex((f) => f.name === "metrics")]!;
    const mapType = metrics.type as Map_<Utf8, Float64>;
    const keys = vectorFromArray(["a", "a", "b"], new Utf8()).data[0]!;
    const values = makeData({ type: new Float64(), length: 3, nullCount: 0, data: Float64Array.of(1, 2, 3) });
    const entries = makeData({ type: mapType.childType, length: 3, nullCount: 0, children: [keys, values] });
    const col = (offsets: number[]) => makeData({ type: mapType, length: rows.length, nullCount: 0, valueOffsets: Int32Array.from(offsets), child: entries });
    expectBatchError(() => decodeRolloutBatch(withColumn("metrics", col([0, 0, 0, 0, 2, 3, 3]))), /row 3, column "metrics": duplicate name "a"/, {
      column: "metrics",
      row: 3,
    });
    // Positive control: the same entries split over two rows are fine.
    assert.deepEqual(
      decodeRolloutBatch(withColumn("metrics", col([0, 0, 0, 0, 1, 3, 3]))).rows.map((r) => r.metrics),
      [{}, {}, {}, { a: 1 }, { a: 2, b: 3 }, {}],
    );
  });

  test("metrics must be Float64 on the wire (a Float32 map is a different column)", () => {
    const table = tableFromIPC(valid);
    const rc = table.batches[0]!.data.children[table.schema.fields.findIndex((f) => f.name === "reward_components")]!;
    expectBatchError(
      () => decodeRolloutBatch(withColumn("metrics", rc)),
      /column "metrics" has type Map<\{key:Utf8, value:Float32\}>, expected Map<\{key:Utf8, value:Float64\}>/,
      { column: "metrics" },
    );
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
    expectBatchError(() => decodeRolloutBatch(withColumn("completion_ids", listWithNull)), /column "completion_ids": null inside a list/, {
      column: "completion_ids",
    });
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
    [
      "logprobs length != completion length",
      (r) => ({ ...r, samplerLogprobs: Float32Array.from([-1, -1, -1, -1]) }),
      /length 4 != completion_ids length 3/,
      "sampler_logprobs",
    ],
    ["infinite logprob", (r) => ({ ...r, samplerLogprobs: Float32Array.from([-1, -Infinity, -1]) }), /position 1 is not finite/, "sampler_logprobs"],
    [
      "unknown message role",
      (r) => ({
        ...r,
        messages: [
          { role: "user", content: "q" },
          { role: "Assistant" as "assistant", content: "a" },
        ],
      }),
      /message 1: role "Assistant" is not one of/,
      "messages",
    ],
    ["state not JSON", (r) => ({ ...r, stateJson: "{" }), /row 4, column "state": not valid JSON/, "state"],
    ["state a JSON number", (r) => ({ ...r, stateJson: "3" }), /must be a JSON object, got number/, "state"],
    ["NaN metric", (r) => ({ ...r, metrics: { len: NaN } }), /metric "len" = NaN/, "metrics"],
    [
      "turn offset past the completion",
      (r) => ({ ...r, turnOffsets: Int32Array.of(0, 4) }),
      /offset 4 at position 1 is past the completion \(length 3\)/,
      "turn_offsets",
    ],
    ["decreasing turn offsets", (r) => ({ ...r, turnOffsets: Int32Array.of(2, 1) }), /offset 1 at position 1 is less than the one before it/, "turn_offsets"],
    ["negative env time", (r) => ({ ...r, envMs: -1 }), /row 4, column "env_ms"/, "env_ms"],
    ["negative example index", (r) => ({ ...r, exampleIndex: -3 }), /row 4, column "example_index"/, "example_index"],
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
    expectBatchError(
      () => decodeRolloutBatch(withColumn("completion_ids", overrun)),
      /column "completion_ids": (values buffer too short|offsets run past the values)/,
    );

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
  const row: RolloutRow = {
    ...rowsOf(1, 41)[0]!,
    rewardComponents: Object.fromEntries([
      ["__proto__", 0.5],
      ["z", 1],
      ["a", -1],
      ["🙂", 0.25],
    ]),
  };
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

test("new fields round-trip exactly: unicode, tool messages with names, empty transcript, empty maps, absent stays absent", () => {
  const base = rowsOf(1, 43)[0]!;
  const transcript: RolloutMessage[] = [
    { role: "system", content: "Réponds en 中文 🧪" },
    { role: "user", content: "", name: "alice" },
    { role: "assistant", content: "calling\ntools\u0000now", toolCallId: "call_é1" },
    { role: "tool", content: "4", name: "计算器", toolCallId: "call_é1" },
    { role: "tool", content: "error: boom", name: "python" },
    { role: "assistant", content: "x".repeat(10_000) },
  ];
  const rows: RolloutRow[] = [
    {
      ...base,
      messages: transcript,
      stateJson: JSON.stringify({ answer: "四", metrics: { turns: 2 }, "🙂": [true, null] }),
      metrics: Object.fromEntries([
        ["評価", 0.1],
        ["__proto__", 2],
        ["a b", -1e-300],
      ]),
      errors: ["sandbox timeout ⏱", ""],
      envMs: 123.456789,
      exampleIndex: 7,
    },
    { ...base, messages: [], stateJson: "{}", metrics: {}, rewardComponents: {}, errors: [], envMs: 0, exampleIndex: 0, turnOffsets: new Int32Array(0) },
  ];
  const out = decodeRolloutBatch(encodeRolloutBatch(rows, META)).rows;
  assert.deepStrictEqual(out, rows.map(onWire));
  assert.equal(out[0]!.metrics["a b"], -1e-300, "metrics are Float64 on the wire");
  assert.equal(out[0]!.envMs, 123.456789);
  for (const [k, m] of out[0]!.messages.entries()) {
    assert.equal("name" in m, transcript[k]!.name !== undefined, `message ${k}: name present iff it was`);
    assert.equal("toolCallId" in m, transcript[k]!.toolCallId !== undefined, `message ${k}: toolCallId present iff it was`);
  }
  assert.deepEqual(Object.keys(out[0]!.metrics), ["評価", "__proto__", "a b"]);
  assert.equal(Object.getPrototypeOf(out[0]!.metrics), Object.prototype);
  // What pyarrow/DuckDB see: the documented snake_case columns with natural types.
  const schema = tableFromIPC(encodeRolloutBatch(rows, META)).schema;
  const types = Object.fromEntries(schema.fields.map((f) => [f.name, String(f.type)]));
  assert.equal(types["messages"], "List<Struct<{role:Utf8, content:Utf8, name:Utf8, tool_call_id:Utf8}>>");
  assert.equal(types["state"], "Utf8");
  assert.equal(types["metrics"], "Map<{key:Utf8, value:Float64}>");
  assert.equal(types["errors"], "List<Utf8>");
  assert.equal(types["turn_offsets"], "List<Int32>");
  assert.equal(types["env_ms"], "Float64");
  assert.equal(types["example_index"], "Int32");
  assert.ok(schema.fields.every((f) => !f.nullable));
});

describe("schema version 1 batches still decode (replay of an old run)", () => {
  // Written by the version-1 encoder (ROLLOUT_SCHEMA_VERSION = 1, before messages/state/metrics/...)
  // and kept verbatim: two rows, meta { run: "old-run", producer: "reward-0", createdAt, step: 9 }.
  const V1_BATCH = Buffer.from(
    [
      "/////xAHAAAQAAAAAAAKAA4ADAAHAAgACgAAAAAAAAEQAAAABAAKAAwAAAAIAAQACgAAAAgAAABYAQAABwAAACgBAAD8AAAAzAAAAIwAAABoAA",
      "AARAAAAAQAAAD8/v//CAAAACQAAAAYAAAAWyJzY2hlbWFWZXJzaW9uIiwic3RlcCJdAAAAAAoAAABycy5udW1lcmljAAA4////CAAAAAwAAAAB",
      "AAAAMgAAAAcAAABycy5yb3dzAFj///8IAAAADAAAAAEAAAA5AAAABAAAAHN0ZXAAAAAAeP///wgAAAAkAAAAGAAAADIwMjUtMDEtMDJUMDM6MD",
      "Q6MDUuMDAwWgAAAAAJAAAAY3JlYXRlZEF0AAAAtP///wgAAAAUAAAACAAAAHJld2FyZC0wAAAAAAgAAABwcm9kdWNlcgAAAADg////CAAAABAA",
      "AAAHAAAAb2xkLXJ1bgADAAAAcnVuAAgADAAIAAQACAAAAAgAAAAMAAAAAQAAADEAAAANAAAAc2NoZW1hVmVyc2lvbgAAABMAAABUBQAAFAUAAO",
      "wEAAC8BAAAUAQAAOgDAAB8AwAADAMAAMwCAACMAgAAXAIAACgCAABsAQAAOAEAAOgAAACgAAAAbAAAADgAAAAEAAAACPv//xAAAAAYAAAAAAAA",
      "AhQAAAAEAAAAc3RlcAAAAAAAAAAAwPv//wAAAAEgAAAAOPv//xAAAAAcAAAAAAAAAxgAAAAIAAAAc2NvcmVfbXMAAAAAAAAAACL9//8AAAIAaP",
      "v//xAAAAAcAAAAAAAAAxgAAAALAAAAZ2VuZXJhdGVfbXMAAAAAAFL9//8AAAIAmPv//xAAAAAcAAAAAAAAAhgAAAAJAAAAbnVtX3R1cm5zAAAA",
      "AAAAAFT8//8AAAABIAAAABAAGAAIAAAAEwAUAAQADAAQAAAANAAAABAAAAAcAAAAAAAABRgAAAALAAAAc3RvcF9yZWFzb24AAAAAANT7//8IAA",
      "gAAAAEAAgAAAAEAAAAsPz//wAAAAEgAAAAKPz//xAAAAAgAAAAAAAABhwAAAAMAAAAaXNfdHJ1bmNhdGVkAAAAAAAAAAAg/P//WPz//xAAAAAk",
      "AAAAAAAAEaQAAAARAAAAcmV3YXJkX2NvbXBvbmVudHMAAAABAAAABAAAAIz8//8QAAAAGAAAAAAAAA1sAAAABwAAAGVudHJpZXMAAgAAADQAAA",
      "AEAAAAuPz//xAAAAAYAAAAAAAAAxQAAAAFAAAAdmFsdWUAAAAAAAAAnv7//wAAAQDk/P//EAAAABQAAAAAAAAFEAAAAAMAAABrZXkAAAAAAND8",
      "///U/P//2Pz//xD9//8QAAAAHAAAAAAAAAMYAAAACQAAAGFkdmFudGFnZQAAAAAAAAD6/v//AAABAED9//8QAAAAGAAAAAAAAAMUAAAABgAAAH",
      "Jld2FyZAAAAAAAACb///8AAAEAbP3//xAAAAAkAAAAAAAAAiAAAAASAAAAcG9saWN5X3ZlcnNpb25fbWF4AAAAAAAAMP7//wAAAAEgAAAAqP3/",
      "/xAAAAAkAAAAAAAAAiAAAAASAAAAcG9saWN5X3ZlcnNpb25fbWluAAAAAAAAbP7//wAAAAEgAAAA5P3//xAAAAAkAAAAAAAADFgAAAAQAAAAc2",
      "FtcGxlcl9sb2dwcm9icwAAAAABAAAABAAAABj+//8QAAAAGAAAAAAAAAMcAAAABAAAAGl0ZW0AAAAAAAAAAAAABgAIAAYABgAAAAAAAQAY/v//",
      "UP7//xAAAAAgAAAAAAAADFQAAAAPAAAAY29tcGxldGlvbl9tYXNrAAEAAAAEAAAAgP7//xAAAAAYAAAAAAAAAhwAAAAEAAAAaXRlbQAAAAAAAA",
      "AAAAAGAAgABAAGAAAACAAAAID+//+4/v//EAAAACAAAAAAAAAMUAAAAA4AAABjb21wbGV0aW9uX2lkcwAAAQAAAAQAAADo/v//EAAAABgAAAAA",
      "AAACFAAAAAQAAABpdGVtAAAAAAAAAACg////AAAAASAAAADk/v//HP///xAAAAAcAAAAAAAADFQAAAAKAAAAcHJvbXB0X2lkcwAAAQAAAAQAAA",
      "BI////EAAAABgAAAAAAAACHAAAAAQAAABpdGVtAAAAAAAAAAAIAAwACAAHAAgAAAAAAAABIAAAAEz///+E////EAAAABwAAAAAAAAFGAAAAAoA",
      "AABleGFtcGxlX2lkAAAAAAAAeP///7D///8QAAAAFAAAAAAAAAUQAAAAAwAAAGVudgAAAAAAnP///9T///8QAAAAHAAAAAAAAAUYAAAACAAAAG",
      "dyb3VwX2lkAAAAAAAAAADI////EAAUAAQAAAAPABAAAAAIABAAAAAQAAAAGAAAAAAAAAUYAAAABwAAAHRhc2tfaWQAAAAAAAQABAAEAAAAAAAA",
      "AP////+wAAAAFAAAAAAAAAAMABwAGgATABQABAAMAAAAIAAAAAAAAAAAAAAAAAAAAhAAAAAAAAQACAAKAAAABAAIAAAAEAAAAAAACgAYAAwACA",
      "AEAAoAAAAUAAAASAAAAAIAAAAAAAAAAAAAAAMAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAABAAAAAAAAAAEAAAAAAAAAAAAAAA",
      "AQAAAAIAAAAAAAAAAAAAAAAAAAAAAAAABAAAAAoAAAAAAAAAc3RvcGxlbmd0aAAAAAAAAP////94BQAAFAAAAAAAAAAMABYAFAAPABAABAAMAA",
      "AAeAEAAAAAAAAAAAADEAAAAAQACgAYAAwACAAEAAoAAAAUAAAAmAMAAAIAAAAAAAAAAAAAADgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAQ",
      "AAAAAAAAABAAAAAAAAAACAAAAAAAAAAYAAAAAAAAAAAAAAAAAAAAGAAAAAAAAAAQAAAAAAAAACgAAAAAAAAACAAAAAAAAAAwAAAAAAAAAAAAAA",
      "AAAAAAMAAAAAAAAAAQAAAAAAAAAEAAAAAAAAAAEAAAAAAAAABQAAAAAAAAAAAAAAAAAAAAUAAAAAAAAAAQAAAAAAAAAGAAAAAAAAAACAAAAAAA",
      "AABoAAAAAAAAAAAAAAAAAAAAaAAAAAAAAAAQAAAAAAAAAHgAAAAAAAAAAAAAAAAAAAB4AAAAAAAAABAAAAAAAAAAiAAAAAAAAAAAAAAAAAAAAI",
      "gAAAAAAAAAEAAAAAAAAACYAAAAAAAAAAAAAAAAAAAAmAAAAAAAAAAQAAAAAAAAAKgAAAAAAAAAAAAAAAAAAACoAAAAAAAAABAAAAAAAAAAuAAA",
      "AAAAAAAAAAAAAAAAALgAAAAAAAAACAAAAAAAAADAAAAAAAAAAAAAAAAAAAAAwAAAAAAAAAAQAAAAAAAAANAAAAAAAAAAAAAAAAAAAADQAAAAAA",
      "AAABAAAAAAAAAA4AAAAAAAAAAAAAAAAAAAAOAAAAAAAAAACAAAAAAAAADoAAAAAAAAAAAAAAAAAAAA6AAAAAAAAAAIAAAAAAAAAPAAAAAAAAAA",
      "AAAAAAAAAADwAAAAAAAAAAgAAAAAAAAA+AAAAAAAAAAAAAAAAAAAAPgAAAAAAAAACAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAAEAAAAAAAAQAA",
      "AAAAAAABABAAAAAAAAAAAAAAAAAAAQAQAAAAAAAAAAAAAAAAAAEAEAAAAAAAAQAAAAAAAAACABAAAAAAAAEAAAAAAAAAAwAQAAAAAAAAAAAAAA",
      "AAAAMAEAAAAAAAAIAAAAAAAAADgBAAAAAAAAAAAAAAAAAAA4AQAAAAAAAAgAAAAAAAAAQAEAAAAAAAAAAAAAAAAAAEABAAAAAAAACAAAAAAAAA",
      "BIAQAAAAAAAAAAAAAAAAAASAEAAAAAAAAIAAAAAAAAAFABAAAAAAAAAAAAAAAAAABQAQAAAAAAABAAAAAAAAAAYAEAAAAAAAAAAAAAAAAAAGAB",
      "AAAAAAAAEAAAAAAAAABwAQAAAAAAAAAAAAAAAAAAcAEAAAAAAAAIAAAAAAAAAAAAAAAaAAAAAgAAAAAAAAAAAAAAAAAAAAIAAAAAAAAAAAAAAA",
      "AAAAACAAAAAAAAAAAAAAAAAAAAAgAAAAAAAAAAAAAAAAAAAAIAAAAAAAAAAAAAAAAAAAADAAAAAAAAAAAAAAAAAAAAAgAAAAAAAAAAAAAAAAAA",
      "AAMAAAAAAAAAAAAAAAAAAAACAAAAAAAAAAAAAAAAAAAAAwAAAAAAAAAAAAAAAAAAAAIAAAAAAAAAAAAAAAAAAAADAAAAAAAAAAAAAAAAAAAAAg",
      "AAAAAAAAAAAAAAAAAAAAIAAAAAAAAAAAAAAAAAAAACAAAAAAAAAAAAAAAAAAAAAgAAAAAAAAAAAAAAAAAAAAIAAAAAAAAAAAAAAAAAAAACAAAA",
      "AAAAAAAAAAAAAAAAAgAAAAAAAAAAAAAAAAAAAAIAAAAAAAAAAAAAAAAAAAACAAAAAAAAAAAAAAAAAAAAAgAAAAAAAAAAAAAAAAAAAAIAAAAAAA",
      "AAAAAAAAAAAAACAAAAAAAAAAAAAAAAAAAAAgAAAAAAAAAAAAAAAAAAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAwAAAAYAAAAAAAAAdC0xdC0yAAAA",
      "AAAAAwAAAAYAAAAAAAAAZy0xZy0xAAAAAAAABwAAAA8AAAAAAAAAZ3NtOGtAMeaVsOWtpkAyAAAAAAAHAAAABwAAAAAAAABnc204ay83AAAAAA",
      "ADAAAAAwAAAAAAAAABAAAAAgAAAAMAAAAAAAAAAAAAAAIAAAADAAAAAAAAAAQAAAAFAAAABgAAAAAAAAAAAAAAAgAAAAMAAAAAAAAAAQABAAAA",
      "AAAAAAAAAgAAAAMAAAAAAAAAAAAAvwAAoL8AAADAAAAAAAMAAAAEAAAABAAAAAQAAAAAAIA/AAAAvwAAAD8AAAC/AAAAAAIAAAACAAAAAAAAAA",
      "AAAAAHAAAADQAAAAAAAABjb3JyZWN0Zm9ybWF0AAAAAACAPwAAgD4CAAAAAAAAAAAAAAABAAAAAQAAAAIAAAAAAAAAAAApQAAAAAAAAFlAAAAA",
      "AAAA6D8AAAAAAAAAAAkAAAAJAAAA/////wAAAAA=",
    ].join(""),
    "base64",
  );
  const V1_DESCRIPTION =
    "task_id: Utf8, group_id: Utf8, env: Utf8, example_id: Utf8, prompt_ids: List<Int32>, completion_ids: List<Int32>, " +
    "completion_mask: List<Uint8>, sampler_logprobs: List<Float32>, policy_version_min: Int32, policy_version_max: Int32, " +
    "reward: Float32, advantage: Float32, reward_components: Map<{key:Utf8, value:Float32}>, is_truncated: Bool, " +
    "stop_reason: Dictionary<Int32, Utf8>, num_turns: Int32, generate_ms: Float64, score_ms: Float64, step: Int32";
  const emptyV2 = { exampleIndex: 0, turnOffsets: new Int32Array(0), metrics: {}, envMs: 0, messages: [], stateJson: "{}", errors: [], versionSpans: [] };

  test("ROLLOUT_FIELDS_V1 is exactly the column list version 1 wrote", () => {
    assert.equal(describeRolloutSchema(ROLLOUT_FIELDS_V1), V1_DESCRIPTION);
    const v1Bytes = tableFromIPC(V1_BATCH)
      .schema.fields.map((f) => `${f.name}: ${String(f.type)}`)
      .join(", ");
    assert.equal(v1Bytes, V1_DESCRIPTION);
    // Version 2 only added columns: every version-1 column keeps its name and type.
    for (const f of ROLLOUT_FIELDS_V1) assert.equal(String(ROLLOUT_FIELDS.find((g) => g.name === f.name)?.type), String(f.type), f.name);
  });

  test("bytes from the version-1 encoder decode, the new fields empty", () => {
    for (const shift of [0, 3]) {
      const buf = new Uint8Array(V1_BATCH.byteLength + 8);
      buf.set(V1_BATCH, shift);
      const out = decodeRolloutBatch(buf.subarray(shift, shift + V1_BATCH.byteLength));
      assert.deepEqual(out.meta, { run: "old-run", producer: "reward-0", createdAt: "2025-01-02T03:04:05.000Z", step: 9, schemaVersion: 1 });
      assert.deepStrictEqual(out.rows, [
        {
          taskId: "t-1",
          groupId: "g-1",
          env: "gsm8k@1",
          exampleId: "gsm8k/7",
          promptIds: Int32Array.from([1, 2, 3]),
          completionIds: Int32Array.from([4, 5]),
          completionMask: Uint8Array.from([1, 0]),
          samplerLogprobs: Float32Array.from([-0.5, -1.25]),
          policyVersionMin: 3,
          policyVersionMax: 4,
          reward: 1,
          advantage: 0.5,
          rewardComponents: { correct: 1, format: 0.25 },
          isTruncated: false,
          stopReason: "stop",
          numTurns: 1,
          generateMs: 12.5,
          scoreMs: 0.75,
          step: 9,
          ...emptyV2,
        },
        {
          taskId: "t-2",
          groupId: "g-1",
          env: "数学@2",
          exampleId: "",
          promptIds: new Int32Array(0),
          completionIds: Int32Array.from([6]),
          completionMask: Uint8Array.from([1]),
          samplerLogprobs: Float32Array.from([-2]),
          policyVersionMin: 4,
          policyVersionMax: 4,
          reward: -0.5,
          advantage: -0.5,
          rewardComponents: {},
          isTruncated: true,
          stopReason: "length",
          numTurns: 2,
          generateMs: 100,
          scoreMs: 0,
          step: 9,
          ...emptyV2,
        },
      ]);
    }
  });

  /** A genuine version-1 stream of `rows`: only the v1 columns, in v1 order, labelled version 1. */
  function asV1(rows: RolloutRow[], drop?: string): Uint8Array {
    const table = tableFromIPC(encodeRolloutBatch(rows, META));
    const names = ROLLOUT_FIELDS_V1.map((f) => f.name).filter((n) => n !== drop);
    const ks = names.map((n) => table.schema.fields.findIndex((f) => f.name === n));
    const fields = ks.map((k) => table.schema.fields[k]!);
    const schema = new Schema(fields, new Map([...table.schema.metadata].map(([k, v]) => [k, k === "schemaVersion" ? "1" : v])));
    const batches = table.batches.map(
      (b) => new RecordBatch(schema, makeData({ type: new Struct(fields), length: b.numRows, nullCount: 0, children: ks.map((k) => b.data.children[k]!) })),
    );
    return tableToIPC(new Table(schema, batches), "stream");
  }

  test("randomised version-1 batches decode to their rows with the new fields empty", () => {
    for (const seed of [51, 52, 53]) {
      const rows = rowsOf(1 + (seed % 17), seed);
      const out = decodeRolloutBatch(asV1(rows));
      assert.equal(out.meta.schemaVersion, 1);
      assert.deepStrictEqual(
        out.rows,
        rows.map((r) => ({ ...onWire(r), ...emptyV2 })),
      );
    }
    assert.deepStrictEqual(decodeRolloutBatch(asV1([])).rows, []);
  });

  test("a version-1 batch is still checked: a missing v1 column is rejected", () => {
    expectBatchError(() => decodeRolloutBatch(asV1(rowsOf(3, 54), "reward")), /missing column "reward" \(Float32\)/, { column: "reward" });
  });
});

test("text columns: the all-ASCII fast path and the per-string UTF-8 path give the same strings", () => {
  const base = rowsOf(1, 44)[0]!;
  const ascii = ["", "plain", "x".repeat(5000), "tabs\tand\nnewlines", "\u007f"];
  const mixed = [...ascii, "é", "🧪", "\u0080"];
  for (const errors of [ascii, mixed]) {
    const out = decodeRolloutBatch(encodeRolloutBatch([{ ...base, errors }], META)).rows[0]!;
    assert.deepStrictEqual(out.errors, errors);
  }
  // Halves of a surrogate pair in two strings stay two (ill-formed) strings, each becoming U+FFFD,
  // rather than being glued into one emoji by encoding the joined text.
  const out = decodeRolloutBatch(encodeRolloutBatch([{ ...base, errors: ["a\uD83D", "\uDE00b"] }], META)).rows[0]!;
  assert.deepStrictEqual(out.errors, ["a\uFFFD", "\uFFFDb"]);
});

/** Spans as an engine records them: the completion cut in two at a weight update (min before, max after), or []
 *  where the versions cannot both be placed (fewer than two tokens). */
function randomSpans(rng: () => number, mask: Uint8Array, min: number, max: number): VersionSpan[] {
  const c = mask.length;
  if (c === 0 || (min !== max && c < 2)) return [];
  if (min === max) return [{ version: min, start: 0, end: c }];
  const cut = 1 + Math.floor(rng() * (c - 1));
  return [
    { version: min, start: 0, end: cut },
    { version: max, start: cut, end: c },
  ];
}
