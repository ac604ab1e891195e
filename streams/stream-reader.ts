// Reads one subject of a stream in order from a given sequence, with no acks: the reader's position
// (the next sequence) is the state. The learner stores it in its checkpoints, so a restored learner and
// `rollstream replay` see exactly the same messages in the same order as the original run.
//
// It is the client's ordered consumer (it recreates itself after a server restart or a gap, from the
// last sequence it delivered) driven through `consume()`, so each message is handed over the moment it
// is stored. A `fetch()` of N would hold the first messages back until N arrived or the pull expired:
// up to a second per optimizer step whenever a step's batches are not a multiple of N.
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
}

type Waited = IteratorResult<JsMsg> | "timeout" | "aborted";

export class StreamReader {
  private consumer: Consumer | null = null;
  private messages: ConsumerMessages | null = null;
  private iterator: AsyncIterator<JsMsg> | null = null;
  /** A next() of the iterator that outlived the last call's wait: the next call picks it up. */
  private pending: Promise<IteratorResult<JsMsg>> | null = null;
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
    this.messages = await this.consumer.consume({ max_messages: this.o.batch ?? 8 });
    this.iterator = this.messages[Symbol.asyncIterator]();
    return this.iterator;
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
    this.consumer = null;
    messages?.stop();
    return consumer ? consumer.delete().catch(() => false) : Promise.resolve(false);
  }

  /** The next message, or null when none arrived within `waitMs` (or the signal fired). */
  async next(waitMs = 1000, signal?: AbortSignal): Promise<JsMsg | null> {
    if (signal?.aborted) return null;
    const started = Date.now();
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      const it = await this.open();
      if (!this.pending) {
        this.pending = it.next();
        this.pending.catch(() => undefined); // a rejection while nobody waits is seen by the next call's race
      }
      const waits: Promise<Waited>[] = [
        this.pending,
        new Promise((r) => (timer = setTimeout(() => r("timeout"), Math.max(0, waitMs - (Date.now() - started))))),
      ];
      if (signal) waits.push(new Promise((r) => signal.addEventListener("abort", (onAbort = () => r("aborted")), { once: true })));
      const got = await Promise.race(waits);
      if (got === "timeout" || got === "aborted") return null;
      this.pending = null;
      if (got.done) {
        // The client gave up on its consumer (stream deleted, connection closed): start over at our position.
        void this.reset();
        return null;
      }
      this.position = got.value.seq + 1;
      return got.value;
    } catch {
      // Stream missing, server unreachable: wait out the rest of this call, then let the caller retry.
      void this.reset();
      await new Promise((r) => setTimeout(r, Math.min(250, Math.max(0, waitMs - (Date.now() - started)))));
      return null;
    } finally {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener("abort", onAbort);
    }
  }

  async close(): Promise<void> {
    await this.reset();
  }
}
