// Commands that look into a finished run (replay, inspect) need its JetStream data. Where that data is
// follows `rollstream train`'s own choice: a server named by --nats, NATS_URL or the config's nats.url;
// else the run's embedded store (runs/<run>/nats), which is served for the command; else the default URL.
// (A server that merely happens to answer at the default URL is not the run's: train did not use it.)
import { existsSync } from "node:fs";
import { join } from "node:path";
import { natsUrlFor } from "../actors/runtime/nats-connect.js";
import { startNatsServer } from "../deploy/local/nats-server.js";

export async function natsForRun(runDir: string | undefined, configUrl?: string, explicit?: string): Promise<{ url: string; stop(): Promise<void> }> {
  const named = explicit ?? process.env.NATS_URL ?? configUrl;
  if (named) return { url: named, stop: async () => undefined };
  if (runDir && existsSync(join(runDir, "nats"))) {
    const server = await startNatsServer({ storeDir: join(runDir, "nats") });
    process.stderr.write(`serving the run's stored streams from ${join(runDir, "nats")} at ${server.url}\n`);
    return { url: server.url, stop: () => server.stop() };
  }
  return { url: natsUrlFor(), stop: async () => undefined };
}
