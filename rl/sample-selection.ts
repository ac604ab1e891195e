// Which samples an optimizer step trains on, and the staleness rule (rl.staleness), over batches read in stream
// order from any feed (the learner's and replay's: the scored stream; rl/ knows nothing of NATS).
// - drop (default): rows in stream order; a row staler than maxOffPolicySteps at the step's version is dropped
//   and counted, never trained.
// - pace: what has arrived is held (up to heldRows); rows past the bound at `version` are taken out of it (never
//   trained, counted); once the held rows can fill the step, whole batches are taken oldest first (lowest
//   policy version, then stream order). Nothing is taken before the step can be filled, so a straggler that
//   arrives while the step waits still goes first. Which batches a step took depends on when they arrived: the
//   learner records them (StepRecord.seqs) so replay and a restored learner follow them (`follow`).

/** What the rule needs of a row: the oldest policy version any of its tokens was sampled under. */
export interface Sampled {
  policyVersionMin: number;
}

/** One batch as read: its stream sequence and its rows (after validation; [] for one set aside). */
export interface Batch<R extends Sampled> {
  seq: number;
  rows: R[];
}

/** Where batches come from, in order. */
export interface BatchFeed<B> {
  /** The next batch, or null when none arrived within waitMs. */
  nextBatch(waitMs: number, signal?: AbortSignal): Promise<B | null>;
  /** Sequence of the next batch the feed returns. */
  readonly position: number;
  /** A sequence the run set aside (dead-lettered): passed over, never waited for. */
  isSetAside(seq: number): boolean;
}

export type StalenessPolicy = "drop" | "pace";

export interface CollectOptions {
  batchSize: number;
  maxOffPolicySteps: number;
  /** drop (default) or pace: see the top of this file. */
  staleness?: StalenessPolicy;
  /** pace: rows held at most (default batchSize × (maxOffPolicySteps + 2)). */
  heldRows?: number;
  /** pace: a step takes exactly these batches (a recorded step: replay, or a learner redoing a step after a restore). */
  follow?: number[];
  signal?: AbortSignal;
  waitMs?: number;
  /** Give up (null) after this long without a batch. */
  giveUpAfterIdleMs?: number;
  /** Called each time a wait for more samples came back empty, with how many are still missing. */
  onIdle?: (missing: number) => Promise<void> | void;
}

export interface CollectedBatch<R extends Sampled, B extends Batch<R>> {
  kept: R[];
  /** The batches the kept rows came from, in stream order (kept is their rows concatenated). */
  sources: B[];
  dropped: number;
  /** The rows counted in `dropped` (past maxOffPolicySteps). */
  droppedRows: R[];
  stalenessMean: number;
  stalenessMax: number;
}

/** Where a paced selection resumes: the first sequence it still holds (or the feed's position), and what it consumed past it. */
export interface ReaderResume {
  seq: number;
  /** Sequences at or past `seq` already trained on (or emptied by the bound): a feed resuming at `seq` passes them over. */
  consumedAhead: number[];
}

/** How long a paced selection waits for a batch it drains (one already delivered or on its way). */
const DRAIN_WAIT_MS = 20;

/** How many policy versions behind the training version a row is. */
export function staleness(version: number, row: Sampled): number {
  return version - row.policyVersionMin;
}

/** Whether a row may be trained at `version` under the bound. */
export function withinBound(version: number, row: Sampled, maxOffPolicySteps: number): boolean {
  return staleness(version, row) <= maxOffPolicySteps;
}

/** pace's order: oldest policy version first, then stream order. */
export function oldestFirst<R extends Sampled>(a: Batch<R>, b: Batch<R>): number {
  return minVersion(a) - minVersion(b) || a.seq - b.seq;
}

function minVersion<R extends Sampled>(b: Batch<R>): number {
  return b.rows.reduce((m, r) => Math.min(m, r.policyVersionMin), Number.POSITIVE_INFINITY);
}

function summary<R extends Sampled, B extends Batch<R>>(version: number, sources: B[], droppedRows: R[], dropped: number): CollectedBatch<R, B> {
  const kept = sources.flatMap((s) => s.rows);
  const stale = kept.map((r) => staleness(version, r));
  return {
    kept,
    sources,
    dropped,
    droppedRows,
    stalenessMean: stale.reduce((a, b) => a + b, 0) / Math.max(1, kept.length),
    stalenessMax: stale.reduce((a, b) => Math.max(a, b), 0),
  };
}

/** The samples of each optimizer step, read from one feed; under pace it holds what arrived early. */
export class StepSelector<R extends Sampled, B extends Batch<R>> {
  /** pace: batches read and not yet trained on, with the rows still inside the bound. */
  private held: B[] = [];
  /** pace: sequences read and no longer held (pruned below the resume point). */
  private readonly consumed = new Set<number>();

  constructor(private readonly feed: BatchFeed<B>) {}

  /**
   * One optimizer step's samples for policy `version`. Null when aborted or idle past giveUpAfterIdleMs.
   * `carry` is what an earlier collect for the same step kept (less what was set aside): it is topped up.
   */
  collect(version: number, o: CollectOptions, carry?: CollectedBatch<R, B>): Promise<CollectedBatch<R, B> | null> {
    return o.staleness === "pace" ? this.collectPaced(version, o, carry) : this.collectInOrder(version, o, carry);
  }

  private async collectInOrder(version: number, o: CollectOptions, carry?: CollectedBatch<R, B>): Promise<CollectedBatch<R, B> | null> {
    const sources: B[] = [...(carry?.sources ?? [])];
    const droppedRows: R[] = [...(carry?.droppedRows ?? [])];
    let dropped = carry?.dropped ?? 0;
    let rows = sources.reduce((n, s) => n + s.rows.length, 0);
    let idleSince = Date.now();
    while (rows < o.batchSize) {
      if (o.signal?.aborted) return null;
      const source = await this.feed.nextBatch(o.waitMs ?? 1000, o.signal);
      if (!source) {
        if (Date.now() - idleSince > (o.giveUpAfterIdleMs ?? Infinity)) return null;
        await o.onIdle?.(o.batchSize - rows);
        continue;
      }
      idleSince = Date.now();
      const fresh = source.rows.filter((r) => withinBound(version, r, o.maxOffPolicySteps));
      const stale = source.rows.filter((r) => !withinBound(version, r, o.maxOffPolicySteps));
      dropped += stale.length;
      droppedRows.push(...stale);
      if (fresh.length > 0) {
        sources.push({ ...source, rows: fresh });
        rows += fresh.length;
      }
    }
    return summary(version, sources, droppedRows, dropped);
  }

  private async collectPaced(version: number, o: CollectOptions, carry?: CollectedBatch<R, B>): Promise<CollectedBatch<R, B> | null> {
    const cap = Math.max(o.batchSize, o.heldRows ?? o.batchSize * (o.maxOffPolicySteps + 2));
    const chosen: B[] = [...(carry?.sources ?? [])];
    const droppedRows: R[] = [...(carry?.droppedRows ?? [])];
    const follow = o.follow ? new Set(o.follow.filter((seq) => !chosen.some((c) => c.seq === seq))) : null;
    if (follow) this.checkFollowable(version, follow);
    const ready = () =>
      follow
        ? [...follow].every((seq) => this.held.some((h) => h.seq === seq) || this.feed.isSetAside(seq))
        : rowsOf(chosen) + rowsOf(this.held) >= o.batchSize;
    let idleSince = Date.now();
    for (;;) {
      if (o.signal?.aborted) return null;
      // Everything already here is held before choosing, so the oldest of it goes first.
      if (!follow) while (rowsOf(this.held) < cap && (await this.drainOne(o.signal))) idleSince = Date.now();
      droppedRows.push(...this.expire(version, o.maxOffPolicySteps));
      if (ready()) break;
      const source = await this.feed.nextBatch(o.waitMs ?? 1000, o.signal);
      if (!source) {
        if (Date.now() - idleSince > (o.giveUpAfterIdleMs ?? Infinity)) return null;
        await o.onIdle?.(Math.max(1, o.batchSize - rowsOf(chosen) - rowsOf(this.held)));
        continue;
      }
      idleSince = Date.now();
      this.hold(source);
    }
    const order = follow ? this.held.filter((h) => follow.has(h.seq)) : [...this.held].sort(oldestFirst);
    for (const h of order) {
      if (!follow && rowsOf(chosen) >= o.batchSize) break;
      chosen.push(h);
      this.release(h);
    }
    chosen.sort((a, b) => a.seq - b.seq);
    return summary(version, chosen, droppedRows, droppedRows.length);
  }

  /** A recorded step can be followed only while the batches it took are still ahead or held. */
  private checkFollowable(version: number, follow: Set<number>): void {
    for (const seq of follow) {
      if (seq < this.feed.position && !this.held.some((h) => h.seq === seq) && !this.feed.isSetAside(seq)) {
        throw new Error(`the recorded step for version ${version} took stream seq ${seq}, which this reader no longer holds`);
      }
    }
  }

  /** Takes the rows past the bound at `version` out of the held batches; returns them. */
  private expire(version: number, bound: number): R[] {
    const out: R[] = [];
    for (const h of [...this.held]) {
      const fresh = h.rows.filter((r) => withinBound(version, r, bound));
      if (fresh.length === h.rows.length) continue;
      out.push(...h.rows.filter((r) => !withinBound(version, r, bound)));
      h.rows = fresh;
      if (fresh.length === 0) this.release(h);
    }
    return out;
  }

  /** One batch that is already here (a short wait), held; false when none came. */
  private async drainOne(signal?: AbortSignal): Promise<boolean> {
    const source = await this.feed.nextBatch(DRAIN_WAIT_MS, signal);
    if (!source) return false;
    this.hold(source);
    return true;
  }

  private hold(source: B): void {
    if (source.rows.length > 0) this.held.push(source);
    else this.consumed.add(source.seq);
  }

  /** A held batch leaves the selection: trained on, or emptied by the bound. */
  private release(source: B): void {
    this.held = this.held.filter((h) => h !== source);
    this.consumed.add(source.seq);
  }

  /** Where a feed must resume to see again what this selection holds and nothing it consumed (stored in checkpoints). */
  resumePoint(): ReaderResume {
    const seq = Math.min(this.feed.position, ...this.held.map((h) => h.seq));
    for (const c of this.consumed) if (c < seq) this.consumed.delete(c);
    return { seq, consumedAhead: [...this.consumed].sort((a, b) => a - b) };
  }

  /** Sequence of the next batch the feed returns (where a drop-rule selection resumes). */
  get position(): number {
    return this.feed.position;
  }

  /** Rows held for later steps (pace). */
  get heldRowCount(): number {
    return rowsOf(this.held);
  }
}

function rowsOf<R extends Sampled>(list: readonly Batch<R>[]): number {
  return list.reduce((n, s) => n + s.rows.length, 0);
}
