// Loads the run's environments from the config once per process. Every actor that touches rollouts
// resolves the same entries, keyed by `key` (default: the env's name).
import type { Environment } from "../../environments/api/index.js";
import { resolveEnvironment } from "../../environments/registry.js";
import { isRemoteEnvironmentId, loadRemoteEnvironment } from "../../environments/remote/index.js";
import { REMOTE_DEFAULTS, type RunConfig } from "./config.js";

export interface LoadedEnvironment {
  key: string;
  /** name@version as resolved */
  id: string;
  weight: number;
  env: Environment;
}

/** One entry of the run's environments: a module resolved by name and range, or a remote server. */
export function loadEnvironmentEntry(entry: RunConfig["environments"][number]): Promise<Environment> {
  if (!isRemoteEnvironmentId(entry.id)) return resolveEnvironment(entry.id, entry.args);
  const d = REMOTE_DEFAULTS;
  return loadRemoteEnvironment({
    ...entry,
    version: entry.version ?? d.version,
    deadlineMs: entry.deadlineMs ?? d.deadlineMs,
    retries: entry.retries ?? d.retries,
    connectMs: entry.connectMs ?? d.connectMs,
  });
}

/** Lets go of the remote environments' connections (their servers keep running). */
export async function closeRunEnvironments(envs: Iterable<LoadedEnvironment>): Promise<void> {
  await Promise.all([...envs].map((l) => l.env.close?.().catch(() => undefined)));
}

// What this process opened for remote environments (server connections, the model endpoint): an actor process
// lets go of them when its actor ends, whichever actor loaded them, so none keeps the process alive.
const openResources = new Set<() => Promise<void>>();

/** Registers something to close when the actor process ends (returns its unregister). */
export function closeAtExit(close: () => Promise<void>): () => void {
  openResources.add(close);
  return () => openResources.delete(close);
}

/** Closes everything registered with closeAtExit (lifecycle calls it when the actor ends). */
export async function closeRunResources(): Promise<void> {
  const all = [...openResources];
  openResources.clear();
  await Promise.all(all.map((c) => c().catch(() => undefined)));
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
    const env = await loadEnvironmentEntry(entry);
    if (env.close) closeAtExit(() => env.close!());
    out.set(key, { key, id: `${env.name}@${env.version}`, weight: entry.weight, env });
  }
  return out;
}
