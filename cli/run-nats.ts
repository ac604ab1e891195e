// Commands that look into a finished run (replay, inspect) need its JetStream data. When no server is
// reachable but the run kept its embedded store (runs/<run>/nats), serve that store for the command.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { natsReachable, natsUrlFor } from "../actors/runtime/nats-connect.js";
import { startNatsServer } from "../deploy/local/nats-server.js";

export async function natsForRun(runDir: string | undefined, configUrl?: string, explicit?: string): Promise<{ url: string; stop(): Promise<void> }> {
  const url = natsUrlFor(configUrl, explicit);
  if (explicit || (await natsReachable(url)) || !runDir || !existsSync(join(runDir, "nats"))) {
    return { url, stop: async () => undefined };
  }
  const server = await startNatsServer({ storeDir: join(runDir, "nats") });
  process.stderr.write(`serving the run's stored streams from ${join(runDir, "nats")} at ${server.url}\n`);
  return { url: server.url, stop: () => server.stop() };
}
