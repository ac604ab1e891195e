// The one way actors work through a durable pull consumer: bounded in-flight work, ack after the
// effect is durable, dead-letter poison messages (counted), nak transient failures, stop on drain.
import { lastValueFrom, tap } from "rxjs";
import type { JsMsg } from "@nats-io/jetstream";
import { handleWith, pullSlots } from "../../streams/consume.js";
import type { ActorContext } from "./actor.js";

export interface ConsumerLoopOptions {
  stream: string;
  durable: string;
  maxInFlight: number;
  /** What one message is, for logs ("task", "rollout group", ...). */
  what: string;
  heartbeatMs?: number;
  maxDeliver?: number;
}

export async function runConsumerLoop(ctx: ActorContext, o: ConsumerLoopOptions, handler: (msg: JsMsg) => Promise<void>): Promise<void> {
  const consumer = await ctx.js.consumers.get(o.stream, o.durable);
  const outcomes = ctx.metrics.counter("messages_total", "messages handled (acked, dead-lettered or nak'd)");
  const dead = ctx.metrics.counter("dead_letters_total", "messages sent to the dead-letter subject");
  await lastValueFrom(
    pullSlots(consumer, { maxInFlight: o.maxInFlight, expiresMs: 1000, signal: ctx.signal }).pipe(
      handleWith(handler, {
        js: ctx.js,
        dlqSubject: ctx.topology.names.subjects.dlq,
        actor: ctx.actor,
        maxInFlight: o.maxInFlight,
        maxDeliver: o.maxDeliver ?? 10,
        // Progress heartbeats well inside the consumers' ack wait.
        heartbeatMs: o.heartbeatMs ?? Math.max(200, Math.min(10_000, Math.floor(ctx.config.nats.taskAckWaitMs / 3))),
        onError: (e, m) => ctx.log.warn({ seq: m.seq, delivery: m.info.deliveryCount, err: (e as Error).message }, `${o.what} failed`),
      }),
      tap((r) => {
        outcomes.inc();
        if (r.kind === "dead-lettered") {
          dead.inc();
          ctx.log.error({ seq: r.msg.seq, err: r.error }, `${o.what} dead-lettered`);
        }
      }),
    ),
    { defaultValue: null },
  );
}
