// Which environment a task draws from: a deterministic weighted choice by task index, so a restarted
// orchestrator (or the SFT stage, or replay) makes the same choice without any history.

/** A small integer hash (murmur3 finaliser) so choices don't depend on iteration history. */
export function hash32(a: number, b: number): number {
  let h = (Math.imul(a ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(b + 0x632be5ab, 0xc2b2ae35)) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  h ^= h >>> 16;
  return h >>> 0;
}

/** Deterministic weighted choice of an environment for task index i. */
export function pickEnvironment<E extends { weight: number }>(envs: readonly E[], seed: number, index: number): E {
  const total = envs.reduce((s, e) => s + e.weight, 0);
  let u = (hash32(seed, index) / 0x1_0000_0000) * total;
  for (const e of envs) {
    if (u < e.weight) return e;
    u -= e.weight;
  }
  return envs[envs.length - 1]!;
}
