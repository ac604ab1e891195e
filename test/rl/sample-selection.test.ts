// The staleness rule and sample selection (rl/sample-selection.ts) over an in-memory feed: no NATS needed,
// the same code the learner and replay run over the scored stream.
import { test } from "node:test";
import assert from "node:assert/strict";
import { StepSelector, type Batch, type BatchFeed } from "../../rl/sample-selection.js";

interface Row {
  id: string;
  policyVersionMin: number;
}

/** Batches handed out in order; `arrived` says how many have arrived so far (the rest wait). */
class Feed implements BatchFeed<Batch<Row>> {
  position = 1;
  arrived: number;
  constructor(
    private readonly batches: Batch<Row>[],
    arrived = batches.length,
    private readonly setAside = new Set<number>(),
  ) {
    this.arrived = arrived;
  }
  async nextBatch(): Promise<Batch<Row> | null> {
    const i = this.batches.findIndex((b) => b.seq >= this.position);
    if (i < 0 || i >= this.arrived) return null;
    const b = this.batches[i]!;
    this.position = b.seq + 1;
    return { seq: b.seq, rows: this.setAside.has(b.seq) ? [] : b.rows.map((r) => ({ ...r })) };
  }
  isSetAside(seq: number): boolean {
    return this.setAside.has(seq);
  }
}

const batch = (seq: number, version: number, n = 2): Batch<Row> => ({
  seq,
  rows: Array.from({ length: n }, (_, i) => ({ id: `${seq}.${i}`, policyVersionMin: version })),
});
const ids = (rows: Row[]) => rows.map((r) => r.id);
const quick = { waitMs: 1, giveUpAfterIdleMs: 5 };

test("drop: rows in stream order, those past the bound dropped and counted, never trained", async () => {
  const s = new StepSelector<Row, Batch<Row>>(new Feed([batch(1, 0), batch(2, 3), batch(3, 3)]));
  const b = (await s.collect(3, { batchSize: 4, maxOffPolicySteps: 1, ...quick }))!;
  assert.deepEqual(ids(b.kept), ["2.0", "2.1", "3.0", "3.1"]);
  assert.equal(b.dropped, 2);
  assert.deepEqual(ids(b.droppedRows), ["1.0", "1.1"]);
  assert.equal(b.stalenessMax, 0);
  // Control: a bound wide enough keeps the old batch, in stream order.
  const wide = new StepSelector<Row, Batch<Row>>(new Feed([batch(1, 0), batch(2, 3), batch(3, 3)]));
  const w = (await wide.collect(3, { batchSize: 4, maxOffPolicySteps: 3, ...quick }))!;
  assert.deepEqual(ids(w.kept), ["1.0", "1.1", "2.0", "2.1"]);
  assert.equal(w.stalenessMax, 3);
});

test("pace: what has arrived is held and taken oldest first; what it holds is where it resumes", async () => {
  const s = new StepSelector<Row, Batch<Row>>(new Feed([batch(1, 2), batch(2, 1), batch(3, 2)]));
  const b = (await s.collect(2, { batchSize: 4, maxOffPolicySteps: 1, staleness: "pace", ...quick }))!;
  // Batch 2 (version 1) is the oldest: it goes first, then batch 1; batch 3 waits for the next step.
  assert.deepEqual(
    b.sources.map((x) => x.seq),
    [1, 2],
  );
  assert.equal(b.dropped, 0);
  assert.equal(s.heldRowCount, 2);
  assert.deepEqual(s.resumePoint(), { seq: 3, consumedAhead: [] });
  // Held past the bound: at version 4 batch 3 (version 2) is 2 behind, dropped out of the hold and counted.
  const next = await s.collect(4, { batchSize: 2, maxOffPolicySteps: 1, staleness: "pace", ...quick });
  assert.equal(next, null, "nothing else arrives");
  assert.equal(s.heldRowCount, 0);
});

test("pace follows a recorded step's batches exactly, and refuses one it no longer holds", async () => {
  const s = new StepSelector<Row, Batch<Row>>(new Feed([batch(1, 0), batch(2, 0), batch(3, 0)]));
  const b = (await s.collect(0, { batchSize: 4, maxOffPolicySteps: 1, staleness: "pace", follow: [1, 3], ...quick }))!;
  assert.deepEqual(
    b.sources.map((x) => x.seq),
    [1, 3],
  );
  assert.deepEqual(s.resumePoint(), { seq: 2, consumedAhead: [3] });
  await assert.rejects(s.collect(1, { batchSize: 2, maxOffPolicySteps: 1, staleness: "pace", follow: [1], ...quick }), /no longer holds/);
});

test("a step waits for samples and says how many are missing; a set-aside batch is never waited for", async () => {
  const feed = new Feed([batch(1, 0), batch(2, 0)], 1, new Set([2]));
  const s = new StepSelector<Row, Batch<Row>>(feed);
  const missing: number[] = [];
  const pending = s.collect(0, { batchSize: 4, maxOffPolicySteps: 0, waitMs: 1, onIdle: (m) => void missing.push(m), giveUpAfterIdleMs: 50 });
  await new Promise((r) => setTimeout(r, 10));
  feed.arrived = 2;
  assert.equal(await pending, null, "batch 2 was set aside: its rows never come");
  assert.ok(missing.length > 0 && missing.every((m) => m === 2), `missing ${missing}`);
});
