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
