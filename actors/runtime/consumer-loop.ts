// How every actor drives a channel's durable consumer: bounded in-flight work, progress heartbeats
// inside the ack wait, and each outcome counted and logged the same way.
import { rejectReasonOf, type ConsumeActivity, type ConsumeOptions } from "../../streams/index.js";
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
    onBlocked: (reason) => {
      ctx.health.blocked(reason && `${what}: ${reason}; waiting, and going on once that is fixed`);
      if (reason) ctx.log.error({ err: reason }, `${what} waits: storage blocked`);
      else ctx.log.info(`${what}: storage writable again, going on`);
    },
    onOutcome: (r) => {
      outcomes.inc();
      if (r.kind === "dead-lettered") {
        dead.inc({ reason: rejectReasonOf(r.error ?? "") });
        ctx.log.error({ seq: r.msg.seq, err: r.error }, `${what} dead-lettered`);
      }
    },
    activity: healthActivity(ctx, what),
  };
}

/** The loop in the actor's heartbeat: idle while it waits for input, working on each message it handles. */
function healthActivity(ctx: ActorContext, what: string): ConsumeActivity {
  const prefix = `rs.${ctx.config.run}.`;
  let inFlight = 0;
  return {
    waiting(subject) {
      const mark = ctx.health.waiting(subject.startsWith(prefix) ? subject.slice(prefix.length) : subject, { idle: true });
      return () => mark.end();
    },
    async handling(msg, fn) {
      ctx.health.inFlight(++inFlight);
      try {
        return await ctx.health.work(`${what} ${msg.msgId ?? `seq ${msg.seq}`}`, fn);
      } finally {
        ctx.health.inFlight(--inFlight);
      }
    },
  };
}
