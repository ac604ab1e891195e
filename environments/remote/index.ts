// Remote environments: one served by a verifiers env-server (`verifiers:<name>`, ZeroMQ) or by an OpenEnv server
// (`openenv:<name>`, WebSocket), loaded from a run config's entry as an Environment like any module's.
import type { Environment } from "../api/environment.js";
import { loadOpenEnvEnvironment } from "./openenv/environment.js";
import { loadVerifiersEnvironment } from "./verifiers/environment.js";

export interface RemoteEntry {
  id: string;
  server?: string;
  url?: string;
  tasks?: { train: string; eval: string };
  version: string;
  deadlineMs: number;
  retries: number;
  connectMs: number;
  args: Record<string, unknown>;
}

export function isRemoteEnvironmentId(id: string): boolean {
  return id.startsWith("verifiers:") || id.startsWith("openenv:");
}

export async function loadRemoteEnvironment(entry: RemoteEntry): Promise<Environment> {
  const colon = entry.id.indexOf(":");
  const protocol = entry.id.slice(0, colon);
  const name = entry.id.slice(colon + 1);
  if (!/^[\w.-]+$/.test(name)) throw new Error(`remote environment ${entry.id}: the name after "${protocol}:" must be letters, digits, . _ or -`);
  const common = { name, deadlineMs: entry.deadlineMs, retries: entry.retries, connectMs: entry.connectMs };
  if (protocol === "verifiers") {
    if (!entry.server || !entry.tasks) throw new Error(`remote environment ${entry.id} needs server and tasks`);
    return loadVerifiersEnvironment({ ...common, version: entry.version, server: entry.server, tasks: entry.tasks });
  }
  if (protocol === "openenv") {
    if (!entry.url) throw new Error(`remote environment ${entry.id} needs url`);
    return loadOpenEnvEnvironment({ ...common, url: entry.url, args: entry.args });
  }
  throw new Error(`unknown remote environment protocol in ${entry.id} (verifiers:<name>, openenv:<name>)`);
}
