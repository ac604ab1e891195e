// How a channel's durable consumer is driven: bounded in-flight work, ack only after the handler's effect
// is durable, poison (undecodable or invalid) messages dead-lettered with the reason, transient failures
// nak'd with a growing delay. The caller sees every outcome (for its metrics and logs).
import { lastValueFrom, tap } from "rxjs";
import type { JsMsg } from "@nats-io/jetstream";
import { handleWith, pullSlots, type Outcome } from "../consume.js";
import { AttemptLedger } from "../attempt-ledger.js";
import { MSG_ID_HEADER } from "../headers.js";
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
  /** Work waits for room on a full disk: the reason when it starts waiting, null when it goes on. */
  onBlocked?(reason: string | null): void;
  /** What the actor's health report sees of the loop (actors/runtime/heartbeat.ts). */
  activity?: ConsumeActivity;
}

/** The loop's waits for messages, and each message's handling, as an actor's health report counts them. */
export interface ConsumeActivity {
  /** The loop has free slots and waits for a message on `subject`; returns the end of that wait. */
  waiting(subject: string): () => void;
  /** Runs one message's handler, so that what the handler waits on (the sandbox) counts against that message. */
  handling<T>(msg: { subject: string; seq: number; msgId?: string }, fn: () => Promise<T>): Promise<T>;
}

export async function consumeDurable(wire: Wire, stream: string, durable: string, handler: (msg: JsMsg) => Promise<void>, o: ConsumeOptions): Promise<void> {
  const consumer = await wire.js.consumers.get(stream, durable);
  const activity = o.activity;
  const subject = activity ? ((await consumer.info(true)).config.filter_subject ?? stream) : stream;
  const handle = activity
    ? (msg: JsMsg) => activity.handling({ subject: msg.subject, seq: msg.seq, msgId: msg.headers?.get(MSG_ID_HEADER) || undefined }, () => handler(msg))
    : handler;
  await lastValueFrom(
    pullSlots(consumer, { maxInFlight: o.maxInFlight, expiresMs: 1000, signal: o.signal, waiting: activity && (() => activity.waiting(subject)) }).pipe(
      handleWith(handle, {
        js: wire.js,
        dlqSubject: wire.names.subjects.dlq,
        actor: o.actor,
        maxInFlight: o.maxInFlight,
        maxDeliver: o.maxDeliver ?? 10,
        heartbeatMs: o.heartbeatMs,
        onError: o.onError,
        onBlocked: o.onBlocked,
        signal: o.signal,
        attempts: new AttemptLedger(() => wire.attempts(), durable),
        crashLimit: o.crashLimit,
      }),
      tap((r) => o.onOutcome?.(r)),
    ),
    { defaultValue: null },
  );
}
