// Reads one subject of a stream in order from a given sequence, through an ephemeral pull consumer
// with no acks: the reader's position (the next sequence) is the state. The learner stores it in its
// checkpoints, so a restored learner and `rollstream replay` see exactly the same messages in the
// same order as the original run.
import { AckPolicy, DeliverPolicy, type JetStreamClient, type JetStreamManager, type JsMsg, type Consumer } from "@nats-io/jetstream";

export interface StreamReaderOptions {
  stream: string;
  subject: string;
  /** First stream sequence to deliver (1 = from the beginning). */
  fromSeq: number;
  /** Messages fetched per pull; keep bytes in flight well under 64 MB. */
  batch?: number;
}

export class StreamReader {
  private consumer: Consumer | null = null;
  private name: string | null = null;
  private buffer: JsMsg[] = [];
  /** Sequence of the next message this reader will return. */
  position: number;

  constructor(private readonly js: JetStreamClient, private readonly jsm: JetStreamManager, private readonly o: StreamReaderOptions) {
    this.position = Math.max(1, o.fromSeq);
  }

  private async open(): Promise<Consumer> {
    if (this.consumer) return this.consumer;
    const info = await this.jsm.consumers.add(this.o.stream, {
      ack_policy: AckPolicy.None,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: this.position,
      filter_subject: this.o.subject,
      inactive_threshold: 120 * 1_000_000_000,
      mem_storage: true,
    });
    this.name = info.name;
    this.consumer = await this.js.consumers.get(this.o.stream, info.name);
    return this.consumer;
  }

  /** The next message, or null when none arrived within `waitMs` (or the signal fired). */
  async next(waitMs = 1000, signal?: AbortSignal): Promise<JsMsg | null> {
    const deadline = Date.now() + waitMs;
    while (this.buffer.length === 0) {
      if (signal?.aborted) return null;
      const c = await this.open();
      try {
        const msgs = await c.fetch({ max_messages: this.o.batch ?? 8, expires: Math.max(1000, Math.min(5000, deadline - Date.now())) });
        for await (const m of msgs) this.buffer.push(m);
      } catch {
        // Consumer gone (server restart, inactivity): reopen at our position.
        this.consumer = null;
        await new Promise((r) => setTimeout(r, 250));
      }
      if (this.buffer.length === 0 && Date.now() >= deadline) return null;
    }
    const m = this.buffer.shift()!;
    this.position = m.seq + 1;
    return m;
  }

  async close(): Promise<void> {
    if (this.name) await this.jsm.consumers.delete(this.o.stream, this.name).catch(() => false);
    this.consumer = null;
    this.name = null;
  }
}
