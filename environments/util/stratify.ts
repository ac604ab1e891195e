/**
 * Held-out splits that follow the train distribution. Hashing tasks into train and eval keeps the two
 * disjoint, but in a small task space the eval part is a few hundred tasks whose mix can differ from train's
 * by chance (which ones landed in it), and an eval split that is harder or easier than train does not measure
 * what training taught. These helpers give every stratum (a class of tasks: digit counts, target size, ...) its
 * train share of the held-out rows, and order the rows so every prefix keeps those shares.
 */
import type { Rng } from "./rng.js";

/** Largest-remainder rounding of `total` × shares (normalised): integers that add up to total. */
export function apportion(total: number, shares: readonly number[]): number[] {
  const sum = shares.reduce((s, x) => s + x, 0);
  if (!(sum > 0)) throw new Error("apportion: the shares must add up to more than 0");
  const exact = shares.map((s) => (total * s) / sum);
  const out = exact.map(Math.floor);
  let left = total - out.reduce((s, x) => s + x, 0);
  const byRemainder = exact.map((x, i) => ({ i, r: x - Math.floor(x) })).sort((p, q) => q.r - p.r || p.i - q.i);
  for (const { i } of byRemainder) {
    if (left-- <= 0) break;
    out[i]! += 1;
  }
  return out;
}

/**
 * Interleaves groups so that every prefix holds each group in its share (±1 row): the evaluator and
 * `rollstream eval -n` read the first rows of a split, and a prefix must be as honest as the whole.
 */
export function interleave<T>(rng: Rng, groups: readonly T[][]): T[] {
  const keyed: Array<{ key: number; tie: number; item: T }> = [];
  for (const g of groups) {
    const offset = rng.next();
    g.forEach((item, k) => keyed.push({ key: (k + offset) / g.length, tie: rng.next(), item }));
  }
  return keyed.sort((x, y) => x.key - y.key || x.tie - y.tie).map((x) => x.item);
}

export interface StratifiedSplitOptions<T> {
  size: number;
  /** The stratum of a task: the features whose train shares the split reproduces. */
  stratum(task: T): string;
  /** The i-th task of the distribution to follow (train rows), read for the strata's shares. */
  reference(i: number): T;
  referenceCount: number;
  /** The i-th candidate for the split: a draw from the held-out partition, as train draws from its own. */
  candidate(i: number): T;
  /** Orders the rows (interleave). */
  rng: Rng;
  /** Candidates looked at before the quotas are given up on, as a multiple of size. Default 200. */
  maxCandidatesPerRow?: number;
}

/**
 * `size` held-out tasks whose strata have the shares they have in the reference: each stratum's quota is
 * filled with candidates in candidate order. A stratum the held-out partition cannot fill within the candidate
 * budget (one the partition all but lacks) leaves its rows to the next candidates of any stratum.
 */
export function stratifiedSplit<T>(o: StratifiedSplitOptions<T>): T[] {
  const counts = new Map<string, number>();
  for (let i = 0; i < o.referenceCount; i++) {
    const s = o.stratum(o.reference(i));
    counts.set(s, (counts.get(s) ?? 0) + 1);
  }
  const strata = [...counts.keys()].sort();
  const quotas = apportion(
    o.size,
    strata.map((s) => counts.get(s)!),
  );
  const want = new Map(strata.map((s, k) => [s, quotas[k]!]));
  const groups = new Map<string, T[]>(strata.map((s) => [s, []]));
  const spare: T[] = [];
  let missing = o.size;
  const budget = o.size * (o.maxCandidatesPerRow ?? 200);
  for (let i = 0; missing > 0 && i < budget; i++) {
    const t = o.candidate(i);
    const s = o.stratum(t);
    const g = groups.get(s);
    if (g && g.length < want.get(s)!) {
      g.push(t);
      missing--;
    } else if (spare.length < o.size) spare.push(t);
  }
  const rows = [...groups.values()].filter((g) => g.length > 0);
  if (missing > 0) rows.push(spare.slice(0, missing));
  return interleave(o.rng, rows);
}
