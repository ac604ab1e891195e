// How every actor drives a channel's durable consumer: bounded in-flight work, progress heartbeats
// inside the ack wait, and each outcome counted and logged the same way.
import { rejectReasonOf, type ConsumeOptions } from "../../streams/index.js";
import type { ActorContext } from "./actor.js";

export function consumeOptions(ctx: ActorContext, what: string, maxInFlight: number): ConsumeOptions {
  const outcomes = ctx.metrics.counter("messages_total", "messages handled (acked, dead-lettered or nak'd)");
  const dead = ctx.metrics.counter("dead_letters_total", "messages sent to the dead-letter subject, by reason", ["reason"]);
  return {
    maxInFlight,
    actor: ctx.actor,
    signal: ctx.signal,
    maxDeliver: 10,
    // Progress heartbeats well inside the consumers' ack wait.
    heartbeatMs: Math.max(200, Math.min(10_000, Math.floor(ctx.config.nats.taskAckWaitMs / 3))),
    onError: (e, m) => ctx.log.warn({ seq: m.seq, delivery: m.info.deliveryCount, err: (e as Error).message }, `${what} failed`),
    onOutcome: (r) => {
      outcomes.inc();
      if (r.kind === "dead-lettered") {
        dead.inc({ reason: rejectReasonOf(r.error ?? "") });
        ctx.log.error({ seq: r.msg.seq, err: r.error }, `${what} dead-lettered`);
      }
    },
  };
}
