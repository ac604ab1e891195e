// Scored rollouts: Arrow IPC batches on rs.<run>.rollouts.scored. A group's rows go out as complete
// batches that each fit in one message (chunk c of n, msg-id `scored:<batch>:<c>`); a single row too big
// for any message is carried through the blob bucket. Headers are padded so batches arrive 8-byte aligned
// and decode in place. The learner and `rollstream replay` read the subject in order from a sequence
// (ScoredReader): a batch that does not decode is copied to the dead-letter subject and skipped.
import type { JsMsg, PubAck } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import { decodeRolloutBatch, encodeRolloutBatch, type DecodedRolloutBatch } from "../arrow-codec.js";
import { encodeChunked } from "../batch-split.js";
import { deadLetter, isPoison } from "../dead-letter.js";
import { ContentType, makeHeaders } from "../headers.js";
import { inlineLimit, publishPayload, readPayload } from "../large-payload.js";
import { retryInfrastructure } from "../infrastructure-error.js";
import { ROLLOUT_SCHEMA_VERSION, type RolloutRow } from "../rollout-schema.js";
import { StreamReader } from "../stream-reader.js";
import { AttemptLedger } from "../attempt-ledger.js";
import type { Wire } from "../wire.js";

export interface ScoredBatchInfo {
  /** Deterministic id of the batch (the task id): a republished group is stored once. */
  batchId: string;
  step: number;
  env: string;
  producer: string;
}

export class ScoredChannel {
  constructor(private readonly wire: Wire) {}

  get subject(): string {
    return this.wire.names.subjects.rolloutsScored;
  }

  /** Publishes a group's rows; returns one ack per message. Nothing is dropped. */
  async publish(rows: RolloutRow[], info: ScoredBatchInfo): Promise<PubAck[]> {
    const meta = { run: this.wire.run, schemaVersion: ROLLOUT_SCHEMA_VERSION, producer: info.producer, createdAt: new Date().toISOString() };
    const maxPayload = this.wire.maxPayload();
    const chunks = encodeChunked(
      rows,
      inlineLimit(maxPayload),
      (part, { chunk, chunks }) => encodeRolloutBatch(part, { ...meta, batchId: info.batchId, chunk, chunks }),
      { allowOversizedRows: true },
    );
    const acks: PubAck[] = [];
    for (const c of chunks) {
      const headers = makeHeaders({
        contentType: ContentType.arrow,
        run: this.wire.run,
        step: info.step,
        env: info.env,
        policyVersion: Math.min(...c.rows.map((r) => r.policyVersionMin)),
        rows: c.rows.length,
        tokens: c.rows.reduce((s, r) => s + r.completionIds.length, 0),
        rewardMean: c.rows.reduce((s, r) => s + r.reward, 0) / Math.max(1, c.rows.length),
        rewardMin: Math.min(...c.rows.map((r) => r.reward)),
        rewardMax: Math.max(...c.rows.map((r) => r.reward)),
        schema: ROLLOUT_SCHEMA_VERSION,
        chunk: `${c.chunk + 1}/${c.chunks}`,
        kind: "rollouts.scored",
      });
      const { ack } = await retryInfrastructure(() =>
        publishPayload(this.wire.js, this.wire.blobs, this.subject, c.bytes, {
          headers,
          msgId: `scored:${info.batchId}:${c.chunk}`,
          maxPayload,
          align: true,
        }),
      );
      acks.push(ack);
    }
    return acks;
  }

  /** Decodes a stored message (following a blob pointer). Throws RolloutBatchError (poison) for a bad batch. */
  async decodeMessage(msg: { data: Uint8Array; headers?: MsgHdrs | undefined }): Promise<DecodedRolloutBatch> {
    return decodeRolloutBatch(await readPayload(msg, this.wire.blobs));
  }

  reader(fromSeq: number, o: ScoredReaderOptions): ScoredReader {
    return new ScoredReader(this, this.wire, fromSeq, o);
  }

  /** The learner's record of training steps started and never finished (its crash-loop guard). */
  stepAttempts(): AttemptLedger {
    return new AttemptLedger(() => this.wire.attempts(), "learner");
  }
}

export interface ScoredReaderOptions {
  actor: string;
  /** Called for each batch that did not decode (after it was dead-lettered, unless readOnly). */
  onDeadLetter?: (msg: JsMsg, reason: string) => void;
  /** A tool re-reading a run (replay) skips bad batches as the learner did, but writes nothing. */
  readOnly?: boolean;
  /** Semantic checks of decoded rows (vocabulary, context, versions): a PoisonMessageError dead-letters the batch. */
  validate?: (rows: RolloutRow[]) => void;
  /** Sequences to pass over unread: what the run already dead-lettered (DeadLetterChannel.originalSeqs). */
  skipSeqs?: Set<number>;
  /** Told when the underlying reader loses its consumer or cannot read (StreamReaderOptions.onTrouble). */
  onTrouble?: (what: string) => void;
}

/** One message's rows as read (validated; [] for a message set aside): what a step keeps, and what the learner sets aside when the rows turn out to be bad. */
export interface BatchSource {
  seq: number;
  msg: JsMsg;
  rows: RolloutRow[];
}

/**
 * Reads scored rows in stream order from a sequence: what the learner trains on and replay re-reads. Which of
 * them a step takes (the staleness rule) is rl/sample-selection.ts's, over this reader as its feed.
 */
export class ScoredReader {
  private readonly reader: StreamReader;

  constructor(
    private readonly channel: ScoredChannel,
    private readonly wire: Wire,
    fromSeq: number,
    private readonly o: ScoredReaderOptions,
  ) {
    this.reader = new StreamReader(wire.js, {
      stream: wire.names.streams.rollouts,
      subject: wire.names.subjects.rolloutsScored,
      fromSeq,
      ...(o.onTrouble ? { onTrouble: o.onTrouble } : {}),
    });
  }

  /** Sequence of the next message this reader will return (stored in checkpoints). */
  get position(): number {
    return this.reader.position;
  }

  /** The rows of the next message, [] for a dead-lettered one, null when none arrived within waitMs. */
  async next(waitMs = 1000, signal?: AbortSignal): Promise<RolloutRow[] | null> {
    return (await this.nextBatch(waitMs, signal))?.rows ?? null;
  }

  /** The next message with its rows (the feed rl/sample-selection.ts selects steps from). */
  async nextBatch(waitMs: number, signal?: AbortSignal): Promise<BatchSource | null> {
    const msg = await this.reader.next(waitMs, signal);
    if (!msg) return null;
    if (this.o.skipSeqs?.has(msg.seq)) return { seq: msg.seq, msg, rows: [] };
    try {
      const { rows } = await this.channel.decodeMessage(msg);
      this.o.validate?.(rows);
      return { seq: msg.seq, msg, rows };
    } catch (e) {
      if (!isPoison(e)) throw e; // the blob store was unreachable: fail and re-read, never skip
      // Nothing is acked on this subject, so a bad batch is copied to the DLQ and skipped.
      await this.reject(msg, (e as Error).message);
      return { seq: msg.seq, msg, rows: [] };
    }
  }

  /** Sets a batch aside after the fact (its rows broke a training step): a copy to the DLQ with the reason. */
  async reject(msg: JsMsg, reason: string): Promise<void> {
    // A reader that goes back over this sequence (a learner recomputing steps after a restore) passes it.
    this.o.skipSeqs?.add(msg.seq);
    if (!this.o.readOnly) await deadLetter(this.wire.js, this.wire.names.subjects.dlq, msg, reason, this.o.actor);
    this.o.onDeadLetter?.(msg, reason);
  }

  /** A sequence the run set aside (dead-lettered), which a selection never waits for. */
  isSetAside(seq: number): boolean {
    return this.o.skipSeqs?.has(seq) ?? false;
  }

  close(): Promise<void> {
    return this.reader.close();
  }
}
