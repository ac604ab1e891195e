// Pull-consumer processing as an rxjs stream with real backpressure: we only fetch as many messages
// as we have free slots, so nothing waits in a client-side buffer while its ack timer runs out.
// Each message is acked only after its handler has made the effect durable; a poison message is
// dead-lettered and terminated; a transient failure is nak'd with a growing delay, except a failure of
// the messaging system itself (a server restarting, a cluster electing a leader), which is retried on the
// message in hand so that an outage does not spend the message's deliveries.
import { Observable, mergeMap, from, type OperatorFunction } from "rxjs";
import type { Consumer, JetStreamClient, JsMsg } from "@nats-io/jetstream";
import { deadLetter, isPoison } from "./dead-letter.js";
import { DEFAULT_CRASH_LIMIT, type AttemptLedger } from "./attempt-ledger.js";
import { RedeliveryGate } from "./redelivery-gate.js";
import { isDiskFull, isInfrastructureError } from "./infrastructure-error.js";

/**
 * Waits before each in-process retry of a handler that failed for the messaging system's sake (~28 s in
 * all): a nak would spend one of the message's deliveries per try, and the server stops delivering a
 * message after max_deliver, so a few seconds of back-off used to spend them all on one outage.
 */
const INFRA_RETRY_MS = [250, 500, 1000, 2000, 4000, 5000, 5000, 5000, 5000];

/** How often work that found a disk full tries again. */
const DISK_FULL_RETRY_MS = 5_000;

export interface PullOptions {
  /** Messages processed at once (and so fetched at most). */
  maxInFlight: number;
  /** How long one pull waits on an empty stream; >= 1 s per DESIGN §3. */
  expiresMs?: number;
  signal?: AbortSignal;
  /** Called when the loop starts waiting for messages with free slots; returns the end of that wait (health reports). */
  waiting?: () => () => void;
}

interface Slot {
  msg: JsMsg;
  release(): void;
}

/** Emits messages from a pull consumer, never more than maxInFlight unreleased at once. */
export function pullSlots(consumer: Consumer, opts: PullOptions): Observable<Slot> {
  return new Observable<Slot>((subscriber) => {
    let inFlight = 0;
    let wake: (() => void) | null = null;
    let stopped = false;
    let endWait: (() => void) | null = null;
    const waitingForMessages = (on: boolean) => {
      if (on) endWait ??= opts.waiting?.() ?? null;
      else {
        endWait?.();
        endWait = null;
      }
    };
    const stop = () => {
      stopped = true;
      wake?.();
    };
    opts.signal?.addEventListener("abort", stop, { once: true });
    const release = () => {
      inFlight--;
      wake?.();
    };
    (async () => {
      while (!stopped && !opts.signal?.aborted) {
        if (inFlight >= opts.maxInFlight) {
          await new Promise<void>((r) => (wake = r));
          wake = null;
          continue;
        }
        const want = opts.maxInFlight - inFlight;
        waitingForMessages(true);
        let batch;
        try {
          batch = await consumer.fetch({ max_messages: want, expires: Math.max(1000, opts.expiresMs ?? 1000) });
        } catch {
          if (stopped) break;
          // The server may be restarting; back off and try again rather than dying.
          await new Promise((r) => setTimeout(r, 500));
          continue;
        }
        try {
          for await (const msg of batch) {
            waitingForMessages(false);
            inFlight++;
            let released = false;
            subscriber.next({
              msg,
              release: () => {
                if (!released) {
                  released = true;
                  release();
                }
              },
            });
          }
        } catch {
          // The pull ended abnormally (server shutdown, leadership change). Messages it did not
          // deliver stay on the server and are redelivered: pull again after a pause.
          if (stopped) break;
          await new Promise((r) => setTimeout(r, 500));
        }
      }
      waitingForMessages(false);
      subscriber.complete();
    })().catch((e) => {
      waitingForMessages(false);
      subscriber.error(e);
    });
    return stop;
  });
}

export type Outcome = { kind: "acked" | "dead-lettered" | "nacked" | "failed-ack"; msg: JsMsg; error?: string };

export interface HandleOptions {
  js: JetStreamClient;
  dlqSubject: string;
  actor: string;
  maxInFlight: number;
  /** After this many deliveries a still-failing message is dead-lettered (matches the consumer's max_deliver). */
  maxDeliver?: number;
  /** Base nak delay; doubles per delivery up to 30 s. */
  nakBaseMs?: number;
  /** Sends `working()` while a handler runs longer than this, so the server does not redeliver. */
  heartbeatMs?: number;
  onError?: (e: unknown, msg: JsMsg) => void;
  /** Work waits for room on a full disk: told the reason when it starts waiting, null when it goes on. */
  onBlocked?: (reason: string | null) => void;
  /** Ends a wait for room on disk (the message is then nak'd as usual). */
  signal?: AbortSignal;
  /**
   * Remembers redelivered messages whose handling never ended (the actor died or hung). A message that
   * ended `crashLimit` such attempts is dead-lettered instead of handled again, so one message cannot
   * crash-loop its actor. Redelivered messages run alone while this is set.
   */
  attempts?: AttemptLedger;
  crashLimit?: number;
}

/** Runs `handler` on each slot and turns its result into ack / dead-letter / nak. */
export function handleWith(handler: (msg: JsMsg) => Promise<void>, o: HandleOptions): OperatorFunction<Slot, Outcome> {
  const gate = new RedeliveryGate();
  return mergeMap((slot: Slot) => from(guarded(slot, handler, o, gate)), o.maxInFlight);
}

/**
 * A first delivery runs next to others. A redelivery may be the message that killed this actor: it runs
 * alone, with its attempt recorded before and cleared after, so attempts that died are counted.
 */
async function guarded(slot: Slot, handler: (msg: JsMsg) => Promise<void>, o: HandleOptions, gate: RedeliveryGate): Promise<Outcome> {
  const { msg } = slot;
  const suspect = o.attempts !== undefined && msg.info.deliveryCount >= 2;
  // Heartbeats run while a suspect waits for the gate too, so the wait does not cost it a redelivery.
  const hb = o.heartbeatMs ? setInterval(() => msg.working(), o.heartbeatMs) : null;
  const release = await gate.acquire(suspect);
  try {
    if (!suspect) return await process(msg, handler, o);
    const id = `${msg.info.stream}.${msg.seq}`;
    let died: number;
    try {
      died = await o.attempts!.begin(id, o.actor, `${msg.subject} seq ${msg.seq}`);
    } catch (e) {
      msg.nak(1000); // the ledger is unreachable: the server is, most likely, too
      return { kind: "nacked", msg, error: `attempt ledger: ${(e as Error).message}` };
    }
    try {
      if (died >= (o.crashLimit ?? DEFAULT_CRASH_LIMIT)) {
        const reason = `crash_loop: ${o.actor} died or hung ${died} times while handling this message (delivery ${msg.info.deliveryCount}); set aside so the run goes on`;
        return await setAside(msg, reason, o);
      }
      return await process(msg, handler, o);
    } finally {
      await o.attempts!.end(id).catch(() => undefined);
    }
  } finally {
    release();
    if (hb) clearInterval(hb);
    slot.release();
  }
}

async function setAside(msg: JsMsg, reason: string, o: HandleOptions): Promise<Outcome> {
  try {
    await deadLetter(o.js, o.dlqSubject, msg, reason, o.actor);
    // The DLQ now holds it: ack (not term) so a work-queue stream releases it too.
    await msg.ackAck().catch(() => msg.term(reason.slice(0, 200)));
    return { kind: "dead-lettered", msg, error: reason };
  } catch {
    msg.nak(1000);
    return { kind: "nacked", msg, error: reason };
  }
}

async function process(msg: JsMsg, handler: (msg: JsMsg) => Promise<void>, o: HandleOptions): Promise<Outcome> {
  let blocked = false;
  try {
    for (let retry = 0; ; retry++) {
      // A full disk heals once space is freed, and the work then succeeds as it is: it waits here for as long
      // as it takes, heartbeating, instead of spending the message's deliveries and being set aside.
      const mayRetry = (e: unknown) => (isDiskFull(e) ? !o.signal?.aborted : retry < INFRA_RETRY_MS.length && isInfrastructureError(e) && !isPoison(e));
      const outcome = await processOnce(msg, handler, o, mayRetry);
      if (!("retry" in outcome)) return outcome;
      const full = isDiskFull(outcome.retry);
      if (full && !blocked) o.onBlocked?.((outcome.retry as Error).message);
      blocked ||= full;
      // The handler is idempotent (msg-ids): running it again on the message in hand is safe.
      msg.working();
      await new Promise((r) => setTimeout(r, full ? DISK_FULL_RETRY_MS : INFRA_RETRY_MS[retry]));
      msg.working();
    }
  } finally {
    if (blocked) o.onBlocked?.(null);
  }
}

/** One run of the handler; retry: it failed for the messaging system's sake, or of a full disk, and may run again here. */
async function processOnce(
  msg: JsMsg,
  handler: (msg: JsMsg) => Promise<void>,
  o: HandleOptions,
  mayRetry: (e: unknown) => boolean,
): Promise<Outcome | { retry: unknown }> {
  try {
    await handler(msg);
    try {
      await msg.ackAck();
      return { kind: "acked", msg };
    } catch (e) {
      // Effect is durable and idempotent (msg-ids), so a redelivery is harmless.
      return { kind: "failed-ack", msg, error: (e as Error).message };
    }
  } catch (e) {
    o.onError?.(e, msg);
    if (mayRetry(e)) return { retry: e };
    const reason = e instanceof Error ? e.message : String(e);
    const exhausted = o.maxDeliver !== undefined && msg.info.deliveryCount >= o.maxDeliver;
    if (isPoison(e) || exhausted) {
      const outcome = await setAside(msg, exhausted && !isPoison(e) ? `gave up after ${msg.info.deliveryCount} deliveries: ${reason}` : reason, o);
      return { ...outcome, error: reason };
    }
    const delay = Math.min(30_000, (o.nakBaseMs ?? 250) * 2 ** Math.max(0, msg.info.deliveryCount - 1));
    msg.nak(delay);
    return { kind: "nacked", msg, error: reason };
  }
}
