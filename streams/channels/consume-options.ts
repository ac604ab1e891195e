// How a channel's durable consumer is driven: bounded in-flight work, ack only after the handler's effect
// is durable, poison (undecodable or invalid) messages dead-lettered with the reason, transient failures
// nak'd with a growing delay. The caller sees every outcome (for its metrics and logs).
import { lastValueFrom, tap } from "rxjs";
import type { JsMsg } from "@nats-io/jetstream";
import { handleWith, pullSlots, type Outcome } from "../consume.js";
import { AttemptLedger } from "../attempt-ledger.js";
import type { Wire } from "../wire.js";

export interface ConsumeOptions {
  /** Messages handled at once (and so fetched at most). */
  maxInFlight: number;
  /** Names the consumer in dead letters (Rs-Actor). */
  actor: string;
  signal: AbortSignal;
  /** Deliveries after which a still-failing message is dead-lettered (the consumer's max_deliver). */
  maxDeliver?: number;
  /** Progress heartbeats (`working()`) while a handler runs longer than this. */
  heartbeatMs?: number;
  /** Attempts of one message that may end with the actor (crash, kill, hang) before it is dead-lettered. */
  crashLimit?: number;
  onOutcome?(o: Outcome): void;
  onError?(e: unknown, msg: JsMsg): void;
}

export async function consumeDurable(wire: Wire, stream: string, durable: string, handler: (msg: JsMsg) => Promise<void>, o: ConsumeOptions): Promise<void> {
  const consumer = await wire.js.consumers.get(stream, durable);
  await lastValueFrom(
    pullSlots(consumer, { maxInFlight: o.maxInFlight, expiresMs: 1000, signal: o.signal }).pipe(
      handleWith(handler, {
        js: wire.js,
        dlqSubject: wire.names.subjects.dlq,
        actor: o.actor,
        maxInFlight: o.maxInFlight,
        maxDeliver: o.maxDeliver ?? 10,
        heartbeatMs: o.heartbeatMs,
        onError: o.onError,
        attempts: new AttemptLedger(() => wire.attempts(), durable),
        crashLimit: o.crashLimit,
      }),
      tap((r) => o.onOutcome?.(r)),
    ),
    { defaultValue: null },
  );
}
