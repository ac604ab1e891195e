// Loads the run's environments from the config once per process. Every actor that touches rollouts
// resolves the same entries, keyed by `key` (default: the env's name).
import type { Environment } from "../../environments/api/index.js";
import { resolveEnvironment } from "../../environments/registry.js";
import type { RunConfig } from "./config.js";

export interface LoadedEnvironment {
  key: string;
  /** name@version as resolved */
  id: string;
  weight: number;
  env: Environment;
}

export function envKeyOf(entry: { id: string; key?: string }): string {
  if (entry.key) return entry.key;
  const at = entry.id.lastIndexOf("@");
  return at > 0 ? entry.id.slice(0, at) : entry.id;
}

export async function loadRunEnvironments(config: RunConfig): Promise<Map<string, LoadedEnvironment>> {
  const out = new Map<string, LoadedEnvironment>();
  for (const entry of config.environments) {
    const key = envKeyOf(entry);
    if (out.has(key)) throw new Error(`two environment entries share the key ${JSON.stringify(key)}: give one a distinct \`key\``);
    const env = await resolveEnvironment(entry.id, entry.args);
    out.set(key, { key, id: `${env.name}@${env.version}`, weight: entry.weight, env });
  }
  return out;
}

/** Deterministic weighted choice of an environment for task index i. */
export function pickEnvironment(envs: LoadedEnvironment[], seed: number, index: number): LoadedEnvironment {
  const total = envs.reduce((s, e) => s + e.weight, 0);
  let u = (hash32(seed, index) / 0x1_0000_0000) * total;
  for (const e of envs) {
    if (u < e.weight) return e;
    u -= e.weight;
  }
  return envs[envs.length - 1]!;
}

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
