// A singleton actor (learner, orchestrator, checkpoint, evaluator) works only while it holds its lease in the
// run's KV (streams/lease.ts): a second instance — a manifest applied twice, a second `train` — stands by,
// heartbeating that it waits on the lease, and takes over when the first one dies or its lease expires. A
// holder that could not renew in time exits at once (ExitCodes.lease), for its launcher to start it again as a
// standby: stopping mid-step is what a crash does already, and never costs more than a restore; running on
// beside a new holder would train twice.
import type { KV } from "@nats-io/kv";
import { describeHolder, processIdentity, RunLeases, type HeldLease, type LeaseRole } from "../../streams/index.js";
import { ExitCodes, type ActorContext } from "./actor.js";
import type { Mark } from "./heartbeat.js";

const SINGLETONS: ReadonlySet<string> = new Set<LeaseRole>(["learner", "orchestrator", "checkpoint", "evaluator"]);

export function isSingleton(actor: string): actor is LeaseRole {
  return SINGLETONS.has(actor);
}

/**
 * Waits for the actor's lease and keeps it renewed (fenced: a holder that could be replaced stops); `onLost` runs
 * when it is lost. Null when the actor was told to stop while it stood by.
 */
export async function holdActorLease(ctx: ActorContext, kv: KV, onLost: (why: string) => void): Promise<HeldLease | null> {
  const role = ctx.actor as LeaseRole;
  const leases = new RunLeases(kv, processIdentity(ctx.instance), ctx.config.actors.lease);
  let wait: Mark | null = null;
  const taken = await leases.standBy(role, ctx.signal, (lease) => {
    ctx.log.info({ holder: lease.holder, since: lease.since }, `standing by: ${role} lease held by ${describeHolder(lease)}`);
    wait?.end();
    wait = ctx.health.waiting("lease", { detail: `held by ${lease.holder}`, idle: true });
  });
  (wait as Mark | null)?.end();
  if (!taken?.held) return null;
  const previous = taken.why === "expired" || taken.why === "holder gone" ? taken.previous?.holder : undefined;
  ctx.log.info({ why: taken.why, previous }, previous ? `took over the ${role} lease from ${previous} (${taken.why})` : `holding the ${role} lease`);
  taken.held.keep(onLost, { fence: true });
  return taken.held;
}

/** The lease is gone: stop now, before another line of work (the heartbeat key keeps the last words). */
export function exitOnLostLease(ctx: ActorContext, why: string): never {
  ctx.log.error({ why }, "lease lost: exiting so that only its new holder works; restarted, this process stands by");
  process.exit(ExitCodes.lease);
}
