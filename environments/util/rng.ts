/**
 * Deterministic randomness for task generators: a row must be a pure function of (seed, split, index) so
 * a restarted run, another actor or an eval sees the same task for the same index.
 */

/** 32-bit FNV-1a hash of a string, finalised with a murmur3 mix. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return fmix32(h >>> 0);
}

export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Hash of several parts, e.g. hashOf(seed, "eval", 12). */
export function hashOf(...parts: Array<string | number>): number {
  return hashString(parts.map(String).join("\u0000"));
}

/** mulberry32: small, fast, good enough for task sampling. */
export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  /** Uniform in [0, 1). */
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** Uniform integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error("Rng.pick: empty list");
    return items[Math.floor(this.next() * items.length)]!;
  }
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [items[i], items[j]] = [items[j]!, items[i]!];
    }
    return items;
  }
}

export function rngFor(...parts: Array<string | number>): Rng {
  return new Rng(hashOf(...parts));
}

/**
 * Splits a task space into disjoint train/eval parts by hashing each task's key: about evalFraction of
 * all tasks are eval tasks, and a generator retries until it draws a task of its own split.
 */
export function isEvalTask(seed: number, key: string, evalFraction = 0.1): boolean {
  return hashOf(seed, "split", key) / 4294967296 < evalFraction;
}
