// Reader and writer for the safetensors format (https://github.com/huggingface/safetensors):
//   [u64 little-endian N][N bytes of JSON header][data]
// The header maps each tensor name to {dtype, shape, data_offsets: [begin, end]} (offsets relative to the
// start of the data) plus an optional "__metadata__" string->string map.
// Everything is converted to f32 on load because the learner keeps f32 master weights; we write f32 or bf16.
// Byte order: safetensors is little-endian, and so is every host we run on (x86-64, arm64), so typed-array
// views over the file bytes read the values directly.
import { z } from "zod";

export type SafetensorsDtype = "F32" | "BF16" | "F16";

export interface LoadedTensor {
  dtype: SafetensorsDtype;
  shape: number[];
  /** Values converted to f32. For an aligned F32 tensor this is a view over the input bytes (no copy). */
  data: Float32Array;
}

export interface TensorToWrite {
  name: string;
  shape: number[];
  data: Float32Array;
  /** Storage type in the file; default F32. BF16 and F16 round to nearest even. */
  dtype?: SafetensorsDtype;
}

export interface SafetensorsHeaderEntry {
  name: string;
  dtype: SafetensorsDtype;
  shape: number[];
  /** Byte range inside the data section. */
  begin: number;
  end: number;
}

export interface SafetensorsHeader {
  metadata: Record<string, string>;
  tensors: SafetensorsHeaderEntry[];
  /** Absolute byte offset of the data section in the file. */
  dataStart: number;
}

export class SafetensorsError extends Error {
  override name = "SafetensorsError";
}

const DTYPE_BYTES: Record<SafetensorsDtype, number> = { F32: 4, BF16: 2, F16: 2 };
// Dtypes the format defines but we do not load: named so the error can say "known but unsupported".
const KNOWN_UNSUPPORTED = new Set(["F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL", "F8_E4M3", "F8_E5M2"]);
// The reference implementation refuses headers above 100 MB; a larger length means a corrupt or hostile file.
const MAX_HEADER_BYTES = 100_000_000;

const nonNegInt = z.number().int().nonnegative();
const entrySchema = z.object({
  dtype: z.string(),
  shape: z.array(nonNegInt),
  data_offsets: z.tuple([nonNegInt, nonNegInt]),
});
const metadataSchema = z.record(z.string(), z.string());

function describeZod(err: z.ZodError): string {
  return err.issues.map((i) => (i.path.length ? `${i.path.join(".")}: ${i.message}` : i.message)).join("; ");
}

/**
 * Top-level keys of a JSON object in source order, including repeats. JSON.parse silently keeps the last
 * duplicate, which would hide a corrupt header, so we scan the text once ourselves.
 */
function topLevelKeys(json: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  let i = 0;
  let expectKey = false;
  while (i < json.length) {
    const c = json[i];
    if (c === '"') {
      const start = i;
      i++;
      while (i < json.length && json[i] !== '"') i += json[i] === "\\" ? 2 : 1;
      i++;
      if (depth === 1 && expectKey) {
        keys.push(JSON.parse(json.slice(start, i)) as string);
        expectKey = false;
      }
      continue;
    }
    if (c === "{" || c === "[") {
      depth++;
      if (depth === 1 && c === "{") expectKey = true;
    } else if (c === "}" || c === "]") depth--;
    else if (c === "," && depth === 1) expectKey = true;
    i++;
  }
  return keys;
}

/** Parses and validates the header without touching tensor data. fileLength: the whole file's size when `bytes` holds only its head. */
export function readSafetensorsHeader(bytes: Uint8Array, fileLength = bytes.length): SafetensorsHeader {
  if (fileLength < 8 || bytes.length < 8) throw new SafetensorsError(`file is ${fileLength} bytes, shorter than the 8-byte header length`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLen = view.getBigUint64(0, true);
  if (headerLen > BigInt(Math.min(bytes.length, fileLength) - 8)) {
    throw new SafetensorsError(`header length ${headerLen} runs past the end of the file (${fileLength - 8} bytes after the length field)`);
  }
  if (headerLen > BigInt(MAX_HEADER_BYTES)) throw new SafetensorsError(`header length ${headerLen} exceeds the ${MAX_HEADER_BYTES}-byte limit`);
  const n = Number(headerLen);
  const dataStart = 8 + n;
  const dataLen = fileLength - dataStart; // fileLength > bytes.length: only the header was read (see model-info.ts)

  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(8, dataStart));
  } catch {
    throw new SafetensorsError("header is not valid UTF-8");
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new SafetensorsError(`header is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new SafetensorsError("header is not a JSON object");
  }
  const seen = new Set<string>();
  for (const k of topLevelKeys(text)) {
    if (seen.has(k)) throw new SafetensorsError(`duplicate tensor name "${k}" in header`);
    seen.add(k);
  }

  let metadata: Record<string, string> = {};
  const tensors: SafetensorsHeaderEntry[] = [];
  for (const [name, raw] of Object.entries(parsed as Record<string, unknown>)) {
    if (name === "__metadata__") {
      const m = metadataSchema.safeParse(raw);
      if (!m.success) throw new SafetensorsError(`__metadata__ must map strings to strings: ${describeZod(m.error)}`);
      metadata = m.data;
      continue;
    }
    const e = entrySchema.safeParse(raw);
    if (!e.success) throw new SafetensorsError(`tensor "${name}": malformed header entry: ${describeZod(e.error)}`);
    const {
      dtype,
      shape,
      data_offsets: [begin, end],
    } = e.data;
    if (!(dtype in DTYPE_BYTES)) {
      const kind = KNOWN_UNSUPPORTED.has(dtype) ? "unsupported" : "unknown";
      throw new SafetensorsError(`tensor "${name}": ${kind} dtype "${dtype}" (supported: F32, BF16, F16)`);
    }
    const d = dtype as SafetensorsDtype;
    if (begin > end) throw new SafetensorsError(`tensor "${name}": data_offsets [${begin}, ${end}] end before they begin`);
    if (end > dataLen) {
      throw new SafetensorsError(`tensor "${name}": data_offsets [${begin}, ${end}] out of range (data section is ${dataLen} bytes)`);
    }
    const numel = shape.reduce((a, b) => a * b, 1);
    if (end - begin !== numel * DTYPE_BYTES[d]) {
      throw new SafetensorsError(
        `tensor "${name}": data_offsets span ${end - begin} bytes but shape [${shape.join(", ")}] of ${d} needs ${numel * DTYPE_BYTES[d]}`,
      );
    }
    tensors.push({ name, dtype: d, shape, begin, end });
  }

  // Overlap check on byte ranges sorted by start; empty tensors occupy no bytes and cannot overlap.
  const byStart = tensors.filter((t) => t.end > t.begin).sort((a, b) => a.begin - b.begin);
  for (let i = 1; i < byStart.length; i++) {
    const prev = byStart[i - 1];
    const cur = byStart[i];
    if (cur.begin < prev.end) {
      throw new SafetensorsError(`tensor "${cur.name}" [${cur.begin}, ${cur.end}] overlaps tensor "${prev.name}" [${prev.begin}, ${prev.end}]`);
    }
  }
  return { metadata, tensors, dataStart };
}

/** The "__metadata__" map of a safetensors file (empty when absent). */
export function readSafetensorsMetadata(bytes: Uint8Array): Record<string, string> {
  return readSafetensorsHeader(bytes).metadata;
}

let f16Table: Float32Array | undefined;
/** All 65536 half-precision values, built once: a table lookup is simpler and faster than bit twiddling per element. */
function halfToFloatTable(): Float32Array {
  if (f16Table) return f16Table;
  const t = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >> 10) & 0x1f;
    const frac = h & 0x3ff;
    if (exp === 0)
      t[h] = sign * frac * 2 ** -24; // zero and subnormals
    else if (exp === 31) t[h] = frac ? NaN : sign * Infinity;
    else t[h] = sign * (1 + frac / 1024) * 2 ** (exp - 15);
  }
  f16Table = t;
  return t;
}

/** A Uint16Array over [off, off+count*2) of bytes, copying once only when the offset is odd. */
function u16View(bytes: Uint8Array, off: number, count: number): Uint16Array {
  const abs = bytes.byteOffset + off;
  if (abs % 2 === 0) return new Uint16Array(bytes.buffer, abs, count);
  return new Uint16Array(bytes.slice(off, off + count * 2).buffer);
}

function decodeTensor(bytes: Uint8Array, dataStart: number, e: SafetensorsHeaderEntry): Float32Array {
  const off = dataStart + e.begin;
  const count = (e.end - e.begin) / DTYPE_BYTES[e.dtype];
  switch (e.dtype) {
    case "F32": {
      const abs = bytes.byteOffset + off;
      if (abs % 4 === 0) return new Float32Array(bytes.buffer, abs, count);
      return new Float32Array(bytes.slice(off, off + count * 4).buffer);
    }
    case "BF16": {
      // bf16 is the top half of an f32: widen by shifting into the high 16 bits.
      const src = u16View(bytes, off, count);
      const out = new Float32Array(count);
      const bits = new Uint32Array(out.buffer);
      for (let i = 0; i < count; i++) bits[i] = src[i] << 16;
      return out;
    }
    case "F16": {
      const src = u16View(bytes, off, count);
      const table = halfToFloatTable();
      const out = new Float32Array(count);
      for (let i = 0; i < count; i++) out[i] = table[src[i]];
      return out;
    }
  }
}

/** Loads every tensor, converted to f32. Throws SafetensorsError on any malformed input. */
export function readSafetensors(bytes: Uint8Array): Map<string, LoadedTensor> {
  const header = readSafetensorsHeader(bytes);
  const out = new Map<string, LoadedTensor>();
  for (const e of header.tensors) {
    out.set(e.name, { dtype: e.dtype, shape: e.shape, data: decodeTensor(bytes, header.dataStart, e) });
  }
  return out;
}

/** f32 -> bf16 with round-to-nearest-even (what torch's .to(bfloat16) does). */
function encodeBf16(data: Float32Array, out: Uint16Array): void {
  const bits = new Uint32Array(data.buffer, data.byteOffset, data.length);
  for (let i = 0; i < data.length; i++) {
    const u = bits[i];
    // NaN: exponent all ones and a non-zero mantissa; rounding could carry it into infinity, so keep it quiet.
    if ((u & 0x7f800000) === 0x7f800000 && (u & 0x7fffff) !== 0) out[i] = (u >>> 16) | 0x40;
    else out[i] = (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
  }
}

/** f32 -> IEEE half with round-to-nearest-even (what torch's .to(float16) does): overflow to inf, subnormals kept. */
function encodeF16(data: Float32Array, out: Uint16Array): void {
  const bits = new Uint32Array(data.buffer, data.byteOffset, data.length);
  const roundShift = (v: number, shift: number): number => {
    const kept = v >>> shift,
      rem = v & ((1 << shift) - 1),
      mid = 1 << (shift - 1);
    return kept + (rem > mid || (rem === mid && kept & 1) ? 1 : 0); // a carry into the exponent is still right
  };
  for (let i = 0; i < data.length; i++) {
    const u = bits[i];
    const sign = (u >>> 16) & 0x8000,
      exp = (u >>> 23) & 0xff,
      mant = u & 0x7fffff;
    const e = exp - 112; // rebias 127 -> 15
    if (exp === 0xff) out[i] = sign | 0x7c00 | (mant ? 0x200 : 0);
    else if (e >= 31) out[i] = sign | 0x7c00;
    else if (e > 0) out[i] = sign | roundShift((e << 23) | mant, 13);
    else if (e >= -10)
      out[i] = sign | roundShift(mant | 0x800000, 14 - e); // half subnormal: units of 2^-24
    else out[i] = sign;
  }
}

/**
 * Serialises tensors to safetensors bytes. Tensors are laid out contiguously, wider dtypes first then by
 * name (as the reference implementation does), so every F32 tensor stays 4-byte aligned in the file.
 */
export function writeSafetensors(tensors: TensorToWrite[], metadata?: Record<string, string>): Uint8Array {
  const names = new Set<string>();
  for (const t of tensors) {
    if (t.name === "__metadata__") throw new SafetensorsError('"__metadata__" is reserved and cannot name a tensor');
    if (names.has(t.name)) throw new SafetensorsError(`duplicate tensor name "${t.name}"`);
    names.add(t.name);
    const dtype = t.dtype ?? "F32";
    if (!(dtype in DTYPE_BYTES)) throw new SafetensorsError(`tensor "${t.name}": cannot write dtype "${dtype}" (F32, BF16 or F16)`);
    if (!t.shape.every((d) => Number.isInteger(d) && d >= 0)) {
      throw new SafetensorsError(`tensor "${t.name}": shape [${t.shape.join(", ")}] must be non-negative integers`);
    }
    const numel = t.shape.reduce((a, b) => a * b, 1);
    if (numel !== t.data.length) {
      throw new SafetensorsError(`tensor "${t.name}": shape [${t.shape.join(", ")}] has ${numel} elements but data has ${t.data.length}`);
    }
  }
  if (metadata !== undefined) {
    const m = metadataSchema.safeParse(metadata);
    if (!m.success) throw new SafetensorsError(`metadata must map strings to strings: ${describeZod(m.error)}`);
  }

  const ordered = [...tensors].sort((a, b) => {
    const wa = DTYPE_BYTES[a.dtype ?? "F32"];
    const wb = DTYPE_BYTES[b.dtype ?? "F32"];
    return wa !== wb ? wb - wa : a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
  });
  const header: Record<string, unknown> = {};
  if (metadata !== undefined) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of ordered) {
    const dtype = t.dtype ?? "F32";
    const size = t.data.length * DTYPE_BYTES[dtype];
    header[t.name] = { dtype, shape: t.shape, data_offsets: [offset, offset + size] };
    offset += size;
  }
  let json = new TextEncoder().encode(JSON.stringify(header));
  // The format requires the data section to start 8-byte aligned; trailing spaces are valid JSON padding.
  const padded = Math.ceil(json.length / 8) * 8;
  if (padded !== json.length) {
    const p = new Uint8Array(padded).fill(0x20);
    p.set(json);
    json = p;
  }

  const out = new Uint8Array(8 + json.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  let pos = 8 + json.length;
  for (const t of ordered) {
    if ((t.dtype ?? "F32") === "F32") {
      out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), pos);
      pos += t.data.byteLength;
    } else {
      // pos is even here (header padded to 8, f32 tensors before us are multiples of 4), so a view is legal.
      (t.dtype === "F16" ? encodeF16 : encodeBf16)(t.data, new Uint16Array(out.buffer, pos, t.data.length));
      pos += t.data.length * 2;
    }
  }
  return out;
}
