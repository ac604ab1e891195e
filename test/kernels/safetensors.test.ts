import { test } from "node:test";
import assert from "node:assert/strict";
import { readSafetensors, readSafetensorsMetadata, readSafetensorsHeader, writeSafetensors, SafetensorsError } from "../../kernels/safetensors.js";

/** Builds a safetensors file from a raw header object and data bytes, so tests can corrupt either. */
function rawFile(header: unknown, data: Uint8Array, headerText?: string): Uint8Array {
  const json = new TextEncoder().encode(headerText ?? JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  return out;
}

function f32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(new Float32Array(values).buffer);
}

function throwsSafetensors(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof SafetensorsError, `expected SafetensorsError, got ${String(e)}`);
    assert.match(e.message, pattern);
    return true;
  });
}

test("f32 round trip is exact, with metadata and shapes kept", () => {
  const a = Float32Array.from({ length: 12 }, (_, i) => Math.sin(i) * 1e3 + 1 / 3);
  const b = Float32Array.from([-0, Infinity, -Infinity, 1e-40, 3.4e38]);
  const bytes = writeSafetensors(
    [
      { name: "b", shape: [5], data: b },
      { name: "a", shape: [3, 4], data: a },
      { name: "scalar", shape: [], data: Float32Array.of(7) },
      { name: "empty", shape: [0, 3], data: new Float32Array(0) },
    ],
    { format: "pt", step: "12" },
  );
  const header = new DataView(bytes.buffer).getBigUint64(0, true);
  assert.equal(Number(header) % 8, 0, "header must be padded to 8 bytes");
  assert.deepEqual(readSafetensorsMetadata(bytes), { format: "pt", step: "12" });
  const m = readSafetensors(bytes);
  assert.deepEqual([...m.keys()].sort(), ["a", "b", "empty", "scalar"]);
  assert.deepEqual(m.get("a")!.shape, [3, 4]);
  assert.equal(m.get("a")!.dtype, "F32");
  assert.deepEqual(Array.from(m.get("a")!.data), Array.from(a));
  assert.ok(Object.is(m.get("b")!.data[0], -0));
  assert.deepEqual(Array.from(m.get("b")!.data), Array.from(b));
  assert.deepEqual(m.get("scalar")!.shape, []);
  assert.equal(m.get("scalar")!.data[0], 7);
  assert.equal(m.get("empty")!.data.length, 0);
});

test("aligned f32 tensors are views over the file; misaligned input is copied and still correct", () => {
  const data = Float32Array.from([1.5, -2.25, 3]);
  const bytes = writeSafetensors([{ name: "x", shape: [3], data }]);
  const loaded = readSafetensors(bytes).get("x")!.data;
  assert.equal(loaded.buffer, bytes.buffer, "aligned f32 should not be copied");
  // Shift the whole file by one byte so the f32 data is no longer 4-byte aligned.
  const shifted = new Uint8Array(bytes.length + 1);
  shifted.set(bytes, 1);
  const view = shifted.subarray(1);
  const copy = readSafetensors(view).get("x")!.data;
  assert.notEqual(copy.buffer, shifted.buffer);
  assert.deepEqual(Array.from(copy), Array.from(data));
});

test("bf16 round trip: exact for bf16-representable values, within bf16 precision otherwise", () => {
  const representable = Float32Array.from([0, 1, -2, 0.5, 1.5, 3.125, -1024, 2 ** -20, 65280, Infinity]);
  const arbitrary = Float32Array.from({ length: 200 }, (_, i) => Math.sin(i * 1.7) * 10 ** ((i % 9) - 4));
  const bytes = writeSafetensors([
    { name: "r", shape: [representable.length], data: representable, dtype: "BF16" },
    { name: "x", shape: [20, 10], data: arbitrary, dtype: "BF16" },
    { name: "f", shape: [2], data: Float32Array.of(1 / 3, 2 / 3) },
  ]);
  const m = readSafetensors(bytes);
  assert.equal(m.get("r")!.dtype, "BF16");
  assert.deepEqual(Array.from(m.get("r")!.data), Array.from(representable));
  const back = m.get("x")!.data;
  for (let i = 0; i < arbitrary.length; i++) {
    // bf16 keeps 8 significant bits: round-to-nearest error is at most half an ulp = 2^-8 relative.
    assert.ok(Math.abs(back[i] - arbitrary[i]) <= Math.abs(arbitrary[i]) * 2 ** -8, `element ${i}: ${arbitrary[i]} -> ${back[i]}`);
  }
  // f32 tensor written after bf16 ones in the caller's list still round-trips exactly.
  assert.deepEqual(Array.from(m.get("f")!.data), Array.from(Float32Array.of(1 / 3, 2 / 3)));
});

test("bf16 rounds half to even and keeps NaN a NaN", () => {
  // 1 + 2^-8 lies halfway between 1 (even mantissa) and 1 + 2^-7 (odd): rounds down to 1.
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  // 1 + 2^-8 + 2^-20 is just above the halfway point: rounds up to 1 + 2^-7.
  const x = Float32Array.from([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, NaN, -(1 + 2 ** -8)]);
  const m = readSafetensors(writeSafetensors([{ name: "t", shape: [5], data: x, dtype: "BF16" }]));
  const y = m.get("t")!.data;
  assert.equal(y[0], 1);
  assert.equal(y[1], 1 + 2 ** -6);
  assert.equal(y[2], 1 + 2 ** -7);
  assert.ok(Number.isNaN(y[3]));
  assert.equal(y[4], -1);
});

test("f16 tensors written by hand load with normals, subnormals, zeros and infinities", () => {
  // IEEE half bit patterns and their values.
  const cases: Array<[number, number]> = [
    [0x3c00, 1],
    [0xc000, -2],
    [0x3555, 0.333251953125],
    [0x7bff, 65504],
    [0x0001, 2 ** -24],
    [0x03ff, 1023 * 2 ** -24],
    [0x0000, 0],
    [0x7c00, Infinity],
    [0xfc00, -Infinity],
    [0x3800, 0.5],
  ];
  const bits = Uint16Array.from(cases.map((c) => c[0]));
  const nanBits = Uint16Array.of(0x7e00);
  const data = new Uint8Array(bits.byteLength + nanBits.byteLength);
  data.set(new Uint8Array(bits.buffer), 0);
  data.set(new Uint8Array(nanBits.buffer), bits.byteLength);
  const file = rawFile(
    {
      h: { dtype: "F16", shape: [2, 5], data_offsets: [0, bits.byteLength] },
      n: { dtype: "F16", shape: [1], data_offsets: [bits.byteLength, bits.byteLength + 2] },
    },
    data,
  );
  const m = readSafetensors(file);
  assert.equal(m.get("h")!.dtype, "F16");
  assert.deepEqual(m.get("h")!.shape, [2, 5]);
  assert.deepEqual(
    Array.from(m.get("h")!.data),
    cases.map((c) => c[1]),
  );
  assert.ok(Number.isNaN(m.get("n")!.data[0]));
});

test("corrupt files throw SafetensorsError naming the problem", () => {
  const good = { w: { dtype: "F32", shape: [2], data_offsets: [0, 8] } };
  const data = f32Bytes([1, 2]);
  assert.doesNotThrow(() => readSafetensors(rawFile(good, data)));

  throwsSafetensors(() => readSafetensors(new Uint8Array(5)), /shorter than the 8-byte header length/);
  const longHeader = rawFile(good, data);
  new DataView(longHeader.buffer).setBigUint64(0, 10_000n, true);
  throwsSafetensors(() => readSafetensors(longHeader), /header length 10000 runs past the end/);
  throwsSafetensors(() => readSafetensors(rawFile(null, data, '{"w": {"dtype": "F32",')), /header is not valid JSON/);
  throwsSafetensors(() => readSafetensors(rawFile(null, data, "[1, 2]")), /not a JSON object/);
  throwsSafetensors(
    () => readSafetensors(rawFile({ w: { dtype: "F32", shape: [2], data_offsets: [0, 16] } }, data)),
    /tensor "w": data_offsets \[0, 16\] out of range/,
  );
  throwsSafetensors(
    () => readSafetensors(rawFile({ w: { dtype: "F32", shape: [3], data_offsets: [0, 8] } }, data)),
    /tensor "w": data_offsets span 8 bytes but shape \[3\] of F32 needs 12/,
  );
  throwsSafetensors(() => readSafetensors(rawFile({ w: { dtype: "F32", shape: [1], data_offsets: [8, 4] } }, data)), /tensor "w".*end before they begin/);
  throwsSafetensors(
    () => readSafetensors(rawFile({ a: { dtype: "F32", shape: [2], data_offsets: [0, 8] }, b: { dtype: "F32", shape: [1], data_offsets: [4, 8] } }, data)),
    /tensor "b" \[4, 8\] overlaps tensor "a" \[0, 8\]/,
  );
  throwsSafetensors(() => readSafetensors(rawFile({ w: { dtype: "I64", shape: [1], data_offsets: [0, 8] } }, data)), /tensor "w": unsupported dtype "I64"/);
  throwsSafetensors(() => readSafetensors(rawFile({ w: { dtype: "Q4", shape: [1], data_offsets: [0, 8] } }, data)), /tensor "w": unknown dtype "Q4"/);
  throwsSafetensors(
    () =>
      readSafetensors(
        rawFile(null, data, '{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}'),
      ),
    /duplicate tensor name "w"/,
  );
  throwsSafetensors(
    () => readSafetensors(rawFile({ w: { dtype: "F32", shape: [-1], data_offsets: [0, 8] } }, data)),
    /tensor "w": malformed header entry: shape\.0/,
  );
  throwsSafetensors(() => readSafetensors(rawFile({ __metadata__: { step: 3 }, ...good }, data)), /__metadata__ must map strings to strings/);
  // A nested key that repeats a top-level name is not a duplicate.
  assert.equal(readSafetensorsHeader(rawFile({ __metadata__: { w: "x" }, ...good }, data)).tensors.length, 1);
});

test("writeSafetensors rejects bad input", () => {
  const d = Float32Array.of(1, 2);
  throwsSafetensors(
    () =>
      writeSafetensors([
        { name: "a", shape: [2], data: d },
        { name: "a", shape: [2], data: d },
      ]),
    /duplicate tensor name "a"/,
  );
  throwsSafetensors(() => writeSafetensors([{ name: "a", shape: [3], data: d }]), /tensor "a": shape \[3\] has 3 elements but data has 2/);
  throwsSafetensors(() => writeSafetensors([{ name: "__metadata__", shape: [2], data: d }]), /reserved/);
  throwsSafetensors(() => writeSafetensors([{ name: "a", shape: [2], data: d, dtype: "F64" as "F32" }]), /cannot write dtype "F64"/);
});

test("f16 write rounds half to even, overflows to infinity, keeps subnormals and NaN, and reads back", () => {
  const x = Float32Array.from([1, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 65504, 65520, -(2 ** -24), 2 ** -25, 3 * 2 ** -25, 2 ** -14 - 2 ** -25, NaN, -Infinity]);
  const bytes = writeSafetensors([{ name: "h", shape: [x.length], data: x, dtype: "F16" }]);
  const { dataStart } = readSafetensorsHeader(bytes);
  const raw = Array.from(new Uint16Array(bytes.slice(dataStart).buffer));
  // 1; tie -> even (1); tie -> even (up); max half; past max -> inf; smallest subnormal; tie at 2^-25 -> 0 (even);
  // 1.5 units -> 2 units (even); just under the smallest normal rounds up into it; NaN; -inf.
  assert.deepEqual(raw.slice(0, 9), [0x3c00, 0x3c00, 0x3c02, 0x7bff, 0x7c00, 0x8001, 0x0000, 0x0002, 0x0400]);
  assert.ok((raw[9] & 0x7c00) === 0x7c00 && (raw[9] & 0x3ff) !== 0, "NaN stays a NaN");
  assert.equal(raw[10], 0xfc00);
  const back = readSafetensors(bytes).get("h")!.data;
  assert.deepEqual(Array.from(back.subarray(0, 4)), [1, 1, 1 + 2 ** -9, 65504]);
});
