// Commands that look into a run (replay, inspect, doctor) need its JetStream data. Where that data is
// follows `rollstream train`'s own choice: a server named by --nats, NATS_URL or the config's nats.url;
// else the embedded server of a live `train` (it writes runs/<run>/nats.url while it runs); else the
// run's embedded store (runs/<run>/nats), served for the command; else the default URL. (A server that
// merely happens to answer at the default URL is not the run's: train did not use it. And a second server
// on the store of a live one would read stale data from files the first is writing.)
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { natsReachable, natsUrlFor } from "../actors/runtime/nats-connect.js";
import { startNatsServer } from "../deploy/local/nats-server.js";

/** Where a live `train` says its embedded server listens. */
export const LIVE_URL_FILE = "nats.url";

export async function natsForRun(runDir: string | undefined, configUrl?: string, explicit?: string): Promise<{ url: string; stop(): Promise<void> }> {
  const named = explicit ?? process.env.NATS_URL ?? configUrl;
  if (named) return { url: named, stop: async () => undefined };
  const live = runDir ? await liveRunUrl(runDir) : null;
  if (live) return { url: live, stop: async () => undefined };
  if (runDir && existsSync(join(runDir, "nats"))) {
    const server = await startNatsServer({ storeDir: join(runDir, "nats") });
    process.stderr.write(`serving the run's stored streams from ${join(runDir, "nats")} at ${server.url}\n`);
    return { url: server.url, stop: () => server.stop() };
  }
  return { url: natsUrlFor(), stop: async () => undefined };
}

/** The URL of the embedded server a live `train` of the run started (it answers now), or null. */
export async function liveRunUrl(runDir: string): Promise<string | null> {
  const file = join(runDir, LIVE_URL_FILE);
  if (!existsSync(file)) return null;
  const url = readFileSync(file, "utf8").trim();
  return url && (await natsReachable(url)) ? url : null;
}
