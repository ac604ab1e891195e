// Reads one subject of a stream in order from a given sequence, with no acks: the reader's position
// (the next sequence) is the state. The learner stores it in its checkpoints, so a restored learner and
// `rollstream replay` see exactly the same messages in the same order as the original run.
//
// It is the client's ordered consumer (it recreates itself after a server restart or a gap, from the
// last sequence it delivered) driven through `consume()`, so each message is handed over the moment it
// is stored. A `fetch()` of N would hold the first messages back until N arrived or the pull expired:
// up to a second per optimizer step whenever a step's batches are not a multiple of N.
//
// The client's ordered consumer is an R1 consumer on one server. When that server dies the client notices
// the missed heartbeats, then asks for the consumer's info until it answers, waiting a pull's expiry (30 s
// by default) between tries: with the server gone for good it waited forever, and a learner on a
// 3-server cluster starved after one SIGKILL. The reader watches the heartbeats itself: three heartbeats of
// silence while it waits, and it opens a new consumer at its position on a server that is up.
import { DeliverPolicy, type ConsumerMessages, type JetStreamClient, type JsMsg, type Consumer } from "@nats-io/jetstream";

export interface StreamReaderOptions {
  stream: string;
  subject: string;
  /** First stream sequence to deliver (1 = from the beginning). */
  fromSeq: number;
  /** Messages buffered ahead of the reader; keep their bytes well under 64 MB. Default 8. */
  batch?: number;
  /** Deliver headers without payloads (listing a subject by its headers). */
  headersOnly?: boolean;
  /**
   * The server sends a heartbeat this often while nothing is stored; three missed ones while the reader
   * waits and it opens a new consumer (default 2,500 ms). 0 leaves a lost consumer to the client alone (the tests' control).
   */
  heartbeatMs?: number;
  /** Told when the reader gives up on its consumer or cannot open one (the learner logs it). */
  onTrouble?: (what: string) => void;
}

type Waited = IteratorResult<JsMsg> | "timeout" | "aborted" | "lost";

const DEFAULT_HEARTBEAT_MS = 2_500;

export class StreamReader {
  private consumer: Consumer | null = null;
  private messages: ConsumerMessages | null = null;
  private iterator: AsyncIterator<JsMsg> | null = null;
  /** A next() of the iterator that outlived the last call's wait: the next call picks it up. */
  private pending: Promise<IteratorResult<JsMsg>> | null = null;
  /** Resolves when the open consumer is lost (silent while we wait, or deleted): the call starts over. */
  private lost: Promise<"lost"> | null = null;
  private loseConsumer: ((why: string) => void) | null = null;
  /** When the open consumer's last heartbeat came (a message starts a new `pending`, see pendingSince). */
  private lastAlive = 0;
  /** When the outstanding `pending` began: the reader has been waiting on an empty buffer since. */
  private pendingSince = 0;
  /** Consumers given up on as lost (the failover test checks it). */
  reopened = 0;
  /** Sequence of the next message this reader will return. */
  position: number;

  constructor(
    private readonly js: JetStreamClient,
    private readonly o: StreamReaderOptions,
  ) {
    this.position = Math.max(1, o.fromSeq);
  }

  private async open(): Promise<AsyncIterator<JsMsg>> {
    if (this.iterator) return this.iterator;
    this.consumer = await this.js.consumers.get(this.o.stream, {
      filter_subjects: this.o.subject,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: this.position,
      ...(this.o.headersOnly ? { headers_only: true } : {}),
    });
    const heartbeatMs = this.o.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
    // A pull lasts 4 heartbeats, so an idle reader re-pulls now and then instead of every 30 s.
    const messages = await this.consumer.consume({
      max_messages: this.o.batch ?? 8,
      ...(heartbeatMs > 0 ? { idle_heartbeat: heartbeatMs, expires: Math.max(1000, 4 * heartbeatMs) } : {}),
    });
    this.messages = messages;
    this.lost = heartbeatMs > 0 ? this.watch(messages) : null;
    this.iterator = messages[Symbol.asyncIterator]();
    return this.iterator;
  }

  /**
   * Resolves "lost" at the first sign that the consumer is gone (the client's own notices, or silence while
   * next() waits: see next()); never, while it is fine.
   */
  private watch(messages: ConsumerMessages): Promise<"lost"> {
    return new Promise<"lost">((resolve) => {
      let done = false;
      this.loseConsumer = (why) => {
        if (done) return;
        done = true;
        this.o.onTrouble?.(`consumer lost (${why}); opening a new one at sequence ${this.position}`);
        resolve("lost");
      };
      (async () => {
        for await (const s of messages.status()) {
          // The client's own "heartbeats_missed" is not used: it also fires while messages sit in the buffer
          // unread (the client pulls no more then, so the server sends nothing), say during a long step.
          if (s.type === "heartbeat") this.lastAlive = Date.now();
          else if (s.type === "consumer_not_found" || s.type === "consumer_deleted") this.loseConsumer?.(s.type);
        }
      })().catch(() => undefined);
    });
  }

  /**
   * Drops the consumer; the next call opens a new one at `position` (nothing skipped, nothing twice).
   * stop(), not close(): close() waits for someone to drain the iterator, and nobody will. The server-side
   * consumer is deleted in the background (it would expire on its own when the server is unreachable).
   */
  private reset(): Promise<boolean> {
    const { messages, consumer } = this;
    this.messages = null;
    this.iterator = null;
    this.pending = null;
    this.lost = null;
    this.loseConsumer = null;
    this.consumer = null;
    messages?.stop();
    return consumer ? consumer.delete().catch(() => false) : Promise.resolve(false);
  }

  /** The next message, or null when none arrived within `waitMs` (or the signal fired). */
  async next(waitMs = 1000, signal?: AbortSignal): Promise<JsMsg | null> {
    if (signal?.aborted) return null;
    const started = Date.now();
    let timer: NodeJS.Timeout | undefined;
    let watchdog: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      const it = await this.open();
      if (!this.pending) {
        this.pendingSince = Date.now();
        this.pending = it.next();
        this.pending.catch(() => undefined); // a rejection while nobody waits is seen by the next call's race
      }
      const waits: Promise<Waited>[] = [
        this.pending,
        new Promise((r) => (timer = setTimeout(() => r("timeout"), Math.max(0, waitMs - (Date.now() - started))))),
      ];
      if (signal) waits.push(new Promise((r) => signal.addEventListener("abort", (onAbort = () => r("aborted")), { once: true })));
      if (this.lost) {
        waits.push(this.lost);
        // While we wait the client has a pull open, so the server sends heartbeats. Silence for three of
        // them is a lost consumer too, whatever state the client is in (it stops its own heartbeat check
        // while it tries to recreate an ordered consumer, and may try for a long time).
        const hb = this.o.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
        // Counted across calls (a caller may wait 1 s at a time), from when the buffer ran dry; checked
        // now and often, since one call may be shorter than a heartbeat.
        const check = () => {
          const silentMs = Date.now() - Math.max(this.lastAlive, this.pendingSince);
          if (silentMs > 3 * hb) this.loseConsumer?.(`no heartbeat for ${silentMs} ms`);
        };
        check();
        watchdog = setInterval(check, Math.min(250, hb));
      }
      const got = await Promise.race(waits);
      if (got === "timeout" || got === "aborted") return null;
      if (got === "lost") {
        // Messages it held but did not hand over are read again by the next consumer, from `position`;
        // the rest of this call's wait goes to that consumer.
        this.reopened++;
        void this.reset();
        clearTimeout(timer);
        clearInterval(watchdog);
        const left = waitMs - (Date.now() - started);
        return left > 0 ? await this.next(left, signal) : null;
      }
      this.pending = null;
      if (got.done) {
        // The client gave up on its consumer (stream deleted, connection closed): start over at our position.
        void this.reset();
        return null;
      }
      this.position = got.value.seq + 1;
      return got.value;
    } catch (e) {
      // Stream missing, server unreachable: wait out the rest of this call, then let the caller retry.
      this.o.onTrouble?.(`read failed (${(e as Error).message}); trying again at sequence ${this.position}`);
      void this.reset();
      await new Promise((r) => setTimeout(r, Math.min(250, Math.max(0, waitMs - (Date.now() - started)))));
      return null;
    } finally {
      clearTimeout(timer);
      clearInterval(watchdog);
      if (onAbort) signal?.removeEventListener("abort", onAbort);
    }
  }

  async close(): Promise<void> {
    await this.reset();
  }
}
