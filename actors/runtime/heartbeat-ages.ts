// How long ago each actor instance last sent a heartbeat, as a Prometheus gauge read from the run's
// health bucket. One actor that lives as long as the run (the orchestrator) exports it, so an alert on a
// silent actor does not depend on scraping that very actor.
import type { ActorContext } from "./actor.js";

/** How often the ages are refreshed: a bucket read per refresh. */
export const HEARTBEAT_AGES_EVERY_MS = 5_000;

export function exportHeartbeatAges(ctx: ActorContext, everyMs = HEARTBEAT_AGES_EVERY_MS): void {
  // The `actor` label names the observed actor; it overrides the registry's default label of the same name.
  const gauge = ctx.metrics.gauge("actor_heartbeat_age_seconds", "seconds since each live actor instance's last heartbeat", ["actor", "instance"]);
  const update = async () => {
    const entries = await ctx.health.peers();
    const now = Date.now();
    // Instances that exited (or whose keys expired) disappear from the gauge instead of ageing forever.
    gauge.reset();
    for (const e of entries) {
      if (e.exited || !e.heartbeat) continue;
      gauge.set({ actor: e.heartbeat.actor, instance: e.heartbeat.instance }, Math.max(0, now - e.written.getTime()) / 1000);
    }
  };
  const timer = setInterval(() => void update().catch(() => undefined), everyMs);
  timer.unref();
  ctx.signal.addEventListener("abort", () => clearInterval(timer), { once: true });
  void update().catch(() => undefined);
}
