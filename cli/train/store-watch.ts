// The disk under the NATS store of a server train started. Debian's nats-server (2.9.10) does not survive
// its store's disk filling up under it: the write that meets ENOSPC leaves JetStream holding a lock, every
// JetStream request (and /jsz) waits forever, and nothing in its log says why; freeing space does not bring
// it back (measured; a max_file_store the server enforces itself is a clean "insufficient resources"
// instead, see streams/infrastructure-error.ts). So train watches: it says "disk full" once, naming the
// store's disk, and once there is room again and JetStream still does not answer, it restarts the server on
// the same port and store (superviseServer brings it back; the file store recovers what was written, and
// the actors' unacknowledged work is redelivered). No person has to restart anything.
import { statfsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import type { ServerHolder } from "./server.js";

export interface StoreWatchOptions {
  /** How often the store's disk and JetStream are looked at. */
  periodMs?: number;
  /** How long JetStream may go without answering, after its disk was full, before the server is restarted. */
  wedgedAfterMs?: number;
  /** Free bytes below which the store's disk counts as full: less than one file-store block fits. */
  fullBelowBytes?: number;
}

/** Free bytes on the file system holding `dir` (for an unprivileged process), or null when it cannot be read. */
export function freeBytes(dir: string): number | null {
  try {
    const s = statfsSync(dir);
    return s.bavail * s.bsize;
  } catch {
    return null;
  }
}

/** Whether JetStream answers its monitoring endpoint within `ms`; the server's process may be alive when not. */
export async function jetStreamAnswers(monitorPort: number, ms: number): Promise<boolean> {
  try {
    const r = await fetch(`http://127.0.0.1:${monitorPort}/jsz`, { signal: AbortSignal.timeout(ms) });
    await r.arrayBuffer();
    return r.ok;
  } catch {
    return false;
  }
}

const mib = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;

/** Watches until the holder stops; returns the loop's promise (it never rejects). */
export async function watchStoreDisk(holder: ServerHolder, o: StoreWatchOptions = {}): Promise<void> {
  const period = o.periodMs ?? 2_000;
  const wedgedAfter = o.wedgedAfterMs ?? 15_000;
  const fullBelow = o.fullBelowBytes ?? 8 * 2 ** 20;
  let lastAnswer = Date.now();
  let fullSince: number | null = null;
  while (!holder.stopping) {
    await sleep(period);
    const srv = holder.server;
    if (!srv || holder.stopping) continue;
    const free = freeBytes(srv.storeDir);
    const full = free !== null && free < fullBelow;
    if (full && fullSince === null) {
      fullSince = Date.now();
      holder.say(
        `disk full: the NATS store's disk (${srv.storeDir}) has ${mib(free)} free; JetStream cannot write there. Free space on that disk: train restarts the run's nats-server if it needs to, and the run goes on`,
      );
    }
    if (await jetStreamAnswers(srv.monitorPort, Math.min(period, 3_000))) {
      lastAnswer = Date.now();
      if (fullSince !== null && !full) {
        holder.say(`the NATS store's disk has room again (${mib(free ?? 0)} free)`);
        fullSince = null;
      }
      continue;
    }
    // Not answering: a restart helps only once there is room, and only a JetStream its full disk stopped.
    if (full || fullSince === null || Date.now() - lastAnswer < wedgedAfter) continue;
    holder.say(
      `JetStream has not answered for ${((Date.now() - lastAnswer) / 1000).toFixed(0)} s since its store's disk filled (${mib(free ?? 0)} free now): restarting the run's nats-server on the same store`,
    );
    fullSince = null;
    lastAnswer = Date.now();
    srv.process.kill("SIGKILL");
  }
}
