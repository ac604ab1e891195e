// Boundary checks shared by PolicyModel and the stand-alone kernels: exact typed-array types, lengths,
// value ranges. Each failure throws an Error that names the argument and what is wrong with it. The native
// side checks again (it can be called from Python too), but these messages speak the TS API's names.

type TypedArrayCtor = Int32ArrayConstructor | Float32ArrayConstructor | Uint8ArrayConstructor;

export function expectArray<C extends TypedArrayCtor>(what: string, value: unknown, ctor: C, length?: number): InstanceType<C> {
  if (!(value instanceof ctor)) {
    const got = value === null ? "null" : ArrayBuffer.isView(value) ? value.constructor.name : typeof value;
    throw new TypeError(`${what} must be a ${ctor.name} (got ${got})`);
  }
  const arr = value as InstanceType<C>;
  if (length !== undefined && arr.length !== length) throw new RangeError(`${what} has length ${arr.length}, expected ${length}`);
  return arr;
}

export function expectInt(what: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== "number" || !Number.isInteger(value)) throw new TypeError(`${what} must be an integer (got ${String(value)})`);
  if (value < min || value > max) throw new RangeError(`${what} must be in [${min}, ${max}] (got ${value})`);
  return value;
}

export function expectFinite(what: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value)) throw new TypeError(`${what} must be a finite number (got ${String(value)})`);
  return value;
}

/** Every id in [0, vocab). */
export function checkTokenIds(what: string, ids: Int32Array, vocab: number): void {
  for (let i = 0; i < ids.length; i++) {
    const t = ids[i];
    if (t < 0 || t >= vocab) throw new RangeError(`${what}[${i}] = ${t} is outside the vocab [0, ${vocab})`);
  }
}

/** Segment starts: first 0, strictly increasing, below T; every segment no longer than maxPositions. */
export function checkSegments(segmentStarts: Int32Array, T: number, maxPositions: number): void {
  if (segmentStarts.length === 0) throw new RangeError("segmentStarts is empty; it needs at least [0]");
  if (segmentStarts[0] !== 0) throw new RangeError(`segmentStarts[0] must be 0 (got ${segmentStarts[0]})`);
  for (let s = 0; s < segmentStarts.length; s++) {
    if (s > 0 && segmentStarts[s] <= segmentStarts[s - 1]) {
      throw new RangeError(`segmentStarts must be strictly increasing (index ${s}: ${segmentStarts[s]} after ${segmentStarts[s - 1]})`);
    }
    if (segmentStarts[s] >= T) throw new RangeError(`segmentStarts[${s}] = ${segmentStarts[s]} is not below the token count ${T}`);
    const end = s + 1 < segmentStarts.length ? segmentStarts[s + 1] : T;
    if (end - segmentStarts[s] > maxPositions) {
      throw new RangeError(
        `segment ${s} (tokens ${segmentStarts[s]}..${end - 1}) is ${end - segmentStarts[s]} tokens long, past maxPositionEmbeddings ${maxPositions}`,
      );
    }
  }
}

/**
 * Group-prefix packing (kernels.h, seg_parent): -1 for a root segment, else an earlier root whose tokens the segment
 * continues; a parent's children follow it contiguously, and parent + child fit maxPositions.
 */
export function checkSegmentParents(parents: Int32Array, segmentStarts: Int32Array, T: number, maxPositions: number): void {
  const S = segmentStarts.length;
  if (parents.length !== S) throw new RangeError(`segmentParents has ${parents.length} entries for ${S} segments`);
  const len = (s: number) => (s + 1 < S ? segmentStarts[s + 1]! : T) - segmentStarts[s]!;
  for (let s = 0; s < S; s++) {
    const p = parents[s]!;
    if (p === -1) continue;
    if (!(p >= 0 && p < s)) throw new RangeError(`segmentParents[${s}] = ${p}: must be -1 or an earlier segment`);
    if (parents[p] !== -1) throw new RangeError(`segmentParents[${s}] = ${p} names a child segment; parents must be roots (one level)`);
    if (s > p + 1 && parents[s - 1] !== p) throw new RangeError(`segment ${s} (child of ${p}) must follow its parent or a sibling`);
    if (len(p) + len(s) > maxPositions) {
      throw new RangeError(`segment ${s} (${len(s)} tokens) after its parent (${len(p)} tokens) is past maxPositionEmbeddings ${maxPositions}`);
    }
  }
}
