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

/** One message's rows that a step kept: what the learner sets aside when the rows turn out to be bad. */
export interface BatchSource {
  msg: JsMsg;
  rows: RolloutRow[];
}

export interface CollectedBatch {
  kept: RolloutRow[];
  /** The messages the kept rows came from, in order (kept is their rows concatenated). */
  sources: BatchSource[];
  dropped: number;
  /** The rows counted in `dropped` (past maxOffPolicySteps), for the learner's metrics by environment and length. */
  droppedRows: RolloutRow[];
  stalenessMean: number;
  stalenessMax: number;
}

/** How the learner treats samples that would be past the staleness bound (rl.staleness). */
export type StalenessPolicy = "drop" | "pace";

export interface CollectOptions {
  batchSize: number;
  maxOffPolicySteps: number;
  /**
   * drop (default): rows in stream order, those past the bound dropped. pace: the reader holds what has
   * arrived and a step takes whole messages oldest first (lowest policy version, then stream order), so a
   * sample near the bound is trained before newer ones instead of being dropped later; a held row that
   * passes the bound anyway is never trained (counted in `dropped`).
   */
  staleness?: StalenessPolicy;
  /** pace: rows held at most (default batchSize × (maxOffPolicySteps + 2)). */
  heldRows?: number;
  /** pace: a step takes exactly these messages (a recorded step: replay, or a learner redoing a step after a restore). */
  follow?: number[];
  signal?: AbortSignal;
  waitMs?: number;
  /** Give up (null) after this long without a message. */
  giveUpAfterIdleMs?: number;
  /** Called each time a wait for more samples came back empty, with how many are still missing. */
  onIdle?: (missing: number) => Promise<void> | void;
}

/** Where a paced reader resumes: the first sequence it still holds (or its position), and what it consumed past it. */
export interface ReaderResume {
  seq: number;
  /** Sequences at or past `seq` already trained on (or emptied by the bound): a reader resuming at `seq` passes them over. */
  consumedAhead: number[];
}

/** How long a paced reader waits for a message it drains (one already delivered or on its way). */
const DRAIN_WAIT_MS = 20;

function minVersion(s: BatchSource): number {
  return s.rows.reduce((m, r) => Math.min(m, r.policyVersionMin), Number.POSITIVE_INFINITY);
}

/** Reads scored rows in stream order from a sequence: what the learner trains on and replay re-reads. */
export class ScoredReader {
  private readonly reader: StreamReader;
  /** pace: messages read and not yet trained on, with the rows still inside the bound. */
  private held: BatchSource[] = [];
  /** pace: sequences read and no longer held (pruned below the resume point). */
  private readonly consumed = new Set<number>();

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
    return (await this.nextSource(waitMs, signal))?.rows ?? null;
  }

  private async nextSource(waitMs: number, signal?: AbortSignal): Promise<BatchSource | null> {
    const msg = await this.reader.next(waitMs, signal);
    if (!msg) return null;
    if (this.o.skipSeqs?.has(msg.seq)) return { msg, rows: [] };
    try {
      const { rows } = await this.channel.decodeMessage(msg);
      this.o.validate?.(rows);
      return { msg, rows };
    } catch (e) {
      if (!isPoison(e)) throw e; // the blob store was unreachable: fail and re-read, never skip
      // Nothing is acked on this subject, so a bad batch is copied to the DLQ and skipped.
      await this.reject(msg, (e as Error).message);
      return { msg, rows: [] };
    }
  }

  /** Sets a batch aside after the fact (its rows broke a training step): a copy to the DLQ with the reason. */
  async reject(msg: JsMsg, reason: string): Promise<void> {
    // A reader that goes back over this sequence (a learner recomputing steps after a restore) passes it.
    this.o.skipSeqs?.add(msg.seq);
    if (!this.o.readOnly) await deadLetter(this.wire.js, this.wire.names.subjects.dlq, msg, reason, this.o.actor);
    this.o.onDeadLetter?.(msg, reason);
  }

  /**
   * One optimizer step's samples for policy `version`, in stream order; samples staler than
   * maxOffPolicySteps are dropped and counted. Null when aborted or idle past giveUpAfterIdleMs.
   * `carry` is what an earlier collect for the same step kept (less what was set aside): it is topped up.
   */
  async collect(version: number, o: CollectOptions, carry?: CollectedBatch): Promise<CollectedBatch | null> {
    if (o.staleness === "pace") return this.collectPaced(version, o, carry);
    const sources: BatchSource[] = [...(carry?.sources ?? [])];
    const kept: RolloutRow[] = sources.flatMap((s) => s.rows);
    let dropped = carry?.dropped ?? 0,
      staleSum = 0,
      staleMax = 0;
    for (const row of kept) {
      staleSum += version - row.policyVersionMin;
      staleMax = Math.max(staleMax, version - row.policyVersionMin);
    }
    const droppedRows: RolloutRow[] = [...(carry?.droppedRows ?? [])];
    let idleSince = Date.now();
    while (kept.length < o.batchSize) {
      if (o.signal?.aborted) return null;
      const source = await this.nextSource(o.waitMs ?? 1000, o.signal);
      if (!source) {
        if (Date.now() - idleSince > (o.giveUpAfterIdleMs ?? Infinity)) return null;
        await o.onIdle?.(o.batchSize - kept.length);
        continue;
      }
      idleSince = Date.now();
      const fresh: RolloutRow[] = [];
      for (const row of source.rows) {
        const staleness = version - row.policyVersionMin;
        if (staleness > o.maxOffPolicySteps) {
          dropped++;
          droppedRows.push(row);
          continue;
        }
        staleSum += staleness;
        staleMax = Math.max(staleMax, staleness);
        fresh.push(row);
      }
      if (fresh.length > 0) {
        sources.push({ msg: source.msg, rows: fresh });
        kept.push(...fresh);
      }
    }
    return { kept, sources, dropped, droppedRows, stalenessMean: staleSum / Math.max(1, kept.length), stalenessMax: staleMax };
  }

  /**
   * rl.staleness pace: what has arrived is held (up to heldRows), rows past the bound at `version` are
   * taken out of it (never trained, counted), and once the held rows can fill the step, whole messages
   * are taken oldest first. Nothing is taken before the step can be filled, so a straggler that arrives
   * while the step waits still goes first. Which messages a step took depends on when they arrived: the
   * learner records them (its step event's `seqs` label) so replay and a restored learner can follow them.
   */
  private async collectPaced(version: number, o: CollectOptions, carry?: CollectedBatch): Promise<CollectedBatch | null> {
    const bound = o.maxOffPolicySteps;
    const cap = Math.max(o.batchSize, o.heldRows ?? o.batchSize * (bound + 2));
    const chosen: BatchSource[] = [...(carry?.sources ?? [])];
    const droppedRows: RolloutRow[] = [...(carry?.droppedRows ?? [])];
    const rowsOf = (list: BatchSource[]) => list.reduce((n, s) => n + s.rows.length, 0);
    const follow = o.follow ? new Set(o.follow.filter((seq) => !chosen.some((c) => c.msg.seq === seq))) : null;
    if (follow) {
      for (const seq of follow) {
        if (seq < this.position && !this.held.some((h) => h.msg.seq === seq) && !this.o.skipSeqs?.has(seq)) {
          throw new Error(`the recorded step for version ${version} took stream seq ${seq}, which this reader no longer holds`);
        }
      }
    }
    const expire = () => {
      for (const h of [...this.held]) {
        const fresh = h.rows.filter((r) => version - r.policyVersionMin <= bound);
        if (fresh.length === h.rows.length) continue;
        droppedRows.push(...h.rows.filter((r) => version - r.policyVersionMin > bound));
        h.rows = fresh;
        if (fresh.length === 0) this.release(h);
      }
    };
    const ready = () =>
      follow
        ? [...follow].every((seq) => this.held.some((h) => h.msg.seq === seq) || this.o.skipSeqs?.has(seq))
        : rowsOf(chosen) + rowsOf(this.held) >= o.batchSize;
    let idleSince = Date.now();
    for (;;) {
      if (o.signal?.aborted) return null;
      // Everything already here is held before choosing, so the oldest of it goes first.
      if (!follow) while (rowsOf(this.held) < cap && (await this.drainOne(o.signal))) idleSince = Date.now();
      expire();
      if (ready()) break;
      const source = await this.nextSource(o.waitMs ?? 1000, o.signal);
      if (!source) {
        if (Date.now() - idleSince > (o.giveUpAfterIdleMs ?? Infinity)) return null;
        await o.onIdle?.(Math.max(1, o.batchSize - rowsOf(chosen) - rowsOf(this.held)));
        continue;
      }
      idleSince = Date.now();
      this.hold(source);
    }
    const order = follow
      ? this.held.filter((h) => follow.has(h.msg.seq))
      : [...this.held].sort((a, b) => minVersion(a) - minVersion(b) || a.msg.seq - b.msg.seq);
    for (const h of order) {
      if (!follow && rowsOf(chosen) >= o.batchSize) break;
      chosen.push(h);
      this.release(h);
    }
    chosen.sort((a, b) => a.msg.seq - b.msg.seq);
    const kept = chosen.flatMap((s) => s.rows);
    const staleness = kept.map((r) => version - r.policyVersionMin);
    return {
      kept,
      sources: chosen,
      dropped: droppedRows.length,
      droppedRows,
      stalenessMean: staleness.reduce((a, b) => a + b, 0) / Math.max(1, kept.length),
      stalenessMax: staleness.reduce((a, b) => Math.max(a, b), 0),
    };
  }

  /** One message that is already here (a short wait), held; false when none came. */
  private async drainOne(signal?: AbortSignal): Promise<boolean> {
    const source = await this.nextSource(DRAIN_WAIT_MS, signal);
    if (!source) return false;
    this.hold(source);
    return true;
  }

  private hold(source: BatchSource): void {
    if (source.rows.length > 0) this.held.push(source);
    else this.consumed.add(source.msg.seq);
  }

  /** A held message leaves the reader: trained on, or emptied by the bound. */
  private release(source: BatchSource): void {
    this.held = this.held.filter((h) => h !== source);
    this.consumed.add(source.msg.seq);
  }

  /** Where a reader must resume to see again what this one holds and nothing it consumed (stored in checkpoints). */
  resumePoint(): ReaderResume {
    const seq = Math.min(this.position, ...this.held.map((h) => h.msg.seq));
    for (const c of this.consumed) if (c < seq) this.consumed.delete(c);
    return { seq, consumedAhead: [...this.consumed].sort((a, b) => a - b) };
  }

  /** Rows held for later steps (pace). */
  get heldRowCount(): number {
    return this.held.reduce((n, s) => n + s.rows.length, 0);
  }

  close(): Promise<void> {
    return this.reader.close();
  }
}
