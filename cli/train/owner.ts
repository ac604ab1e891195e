// `train`'s third step, owning the run: the run's train lease (streams/lease.ts), taken as soon as train is
// connected, in the run's state bucket alone: a second `train` of a running run is refused in one line that
// names the owner, before it changes anything of the run (its streams, its folder) or launches anything. A
// train whose previous owner died (the lease expired, or its process is gone from this host) takes over. The
// session renews the lease while train runs and cleanup() gives it back (session.ts).
import { rmSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { ExitCodes } from "../../actors/runtime/actor.js";
import { connectNats } from "../../actors/runtime/nats-connect.js";
import { deleteTopology, describeHolder, openStateBucket, processIdentity, RunLeases, type HeldLease, type Lease } from "../../streams/index.js";
import { LIVE_URL_FILE } from "../run-nats.js";
import { claimRunFolder, type PreparedRun } from "./prepare.js";
import type { FoundServer } from "./server.js";

export interface OwnedRun {
  nc: NatsConnection;
  lease: HeldLease;
}

/**
 * Connects and takes the run for this train; --fresh then deletes the run's streams and folder. Or exit code 4,
 * said, when another train owns the run: the connection closed and a server train started stopped.
 */
export async function claimRun(run: PreparedRun, found: FoundServer, fresh: boolean): Promise<OwnedRun | number> {
  const { config } = run;
  const nc = await connectNats(found.url, "rollstream-train");
  const leases = new RunLeases(await openStateBucket(nc, config.run, config.nats.replicas), processIdentity("train"), config.actors.lease);
  let taken = await leases.take("train");
  if (taken.held && fresh) {
    // The buckets go, and the lease with them: taken again in the new bucket (by whoever comes first).
    await deleteTopology(nc, config.run);
    const again = new RunLeases(await openStateBucket(nc, config.run, config.nats.replicas), processIdentity("train"), config.actors.lease);
    taken = await again.take("train");
  }
  if (!taken.held) {
    process.stderr.write(`${refusal(config.run, taken.lease, taken.expiresAt)}\n`);
    await nc.drain().catch(() => undefined);
    await found.server?.stop();
    if (found.server) rmSync(join(run.runDir, LIVE_URL_FILE), { force: true });
    return ExitCodes.lease;
  }
  if ((taken.why === "expired" || taken.why === "holder gone") && taken.previous)
    process.stdout.write(
      `run ${config.run}: taking over from ${taken.previous.holder} (${taken.why === "expired" ? "its lease expired" : "that process is gone"})\n`,
    );
  claimRunFolder(run, fresh);
  return { nc, lease: taken.held };
}

/** The one line a refused train prints. */
export function refusal(run: string, lease: Lease, expiresAt: number): string {
  return (
    `run ${run} is being trained by ${describeHolder(lease)}: not starting a second train of it` +
    ` (if that process is gone, its lease expires at ${new Date(expiresAt).toISOString()})`
  );
}
