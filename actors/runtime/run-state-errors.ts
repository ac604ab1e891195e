// How an actor reports a fault of the run's state (a KV value written by hand, not JSON, or beyond what the run
// can have trained): as an error about the run that names the bucket, the key and the value — in the log, where
// `doctor` shows an actor's last error, and counted — never as a fault of the message it was working on.
import { PolicyVersions, type RunState, type RunStateProblem, type StateValueError, type WeightsChannel } from "../../streams/index.js";
import type { ActorContext } from "./actor.js";

export function reportRunStateProblem(ctx: ActorContext, p: RunStateProblem): void {
  ctx.metrics.counter("run_state_errors_total", "bad values found in the run's state KV (reported, never a reason to drop data)", ["key"]).inc({ key: p.key });
  ctx.log.error({ key: p.key, revision: p.revision }, p.message);
}

/** A StateValueError reported once per key and revision (`seen` keeps what was said). */
export function reportStateValueError(ctx: ActorContext, e: StateValueError, seen: Map<string, number>, then: string): void {
  if (seen.get(e.key) === e.revision) return;
  seen.set(e.key, e.revision);
  reportRunStateProblem(ctx, { message: `${e.message}; ${then}`, key: e.key, revision: e.revision });
}

/** The run's newest trustworthy policy version for this actor, its faults reported as above. */
export function policyVersionsOf(ctx: ActorContext, state: RunState, weights: WeightsChannel): PolicyVersions {
  return new PolicyVersions(state, weights, ctx.config.rl.steps, (p) => reportRunStateProblem(ctx, p));
}
