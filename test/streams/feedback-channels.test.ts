// The typed feedback channels against a real nats-server: rs.<run>.groups and rs.<run>.steps refuse a bad
// value on publish, and their readers dead-letter a stored value with a bad field (the reason names the field)
// while handing on the good ones; each step record of a recomputed step is kept, a retried publish once.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { encode } from "@msgpack/msgpack";
import { startTestNats } from "../helpers/nats.js";
import { storedMessages } from "../helpers/run-fixture.js";
import { outcomeOf } from "../helpers/feedback-fixtures.js";
import { ensureTopology, Hdr, readStepRecords, RunChannels, stepRecordOf, type Task } from "../../streams/index.js";

const task: Task = {
  run: "fb",
  taskId: "fb:0:3",
  epoch: 0,
  index: 3,
  step: 1,
  env: "arithmetic@1.0.0",
  envKey: "arithmetic",
  exampleIndex: 3,
  groupSize: 4,
  sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 },
  seed: 7,
};

async function withChannels(body: (ch: RunChannels, dlq: () => Promise<Array<{ reason: string; subject: string }>>) => Promise<void>) {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const topo = await ensureTopology(nc, "fb");
    const ch = new RunChannels(topo.wire);
    const dlq = async () =>
      (await storedMessages(await jetstreamManager(nc), topo.names.streams.events, topo.names.subjects.dlq)).map((m) => ({
        reason: m.header?.get(Hdr.error) ?? "",
        subject: m.header?.get(Hdr.originalSubject) ?? "",
      }));
    await body(ch, dlq);
  } finally {
    await nc.close();
    await srv.cleanup();
  }
}

test("groups: a bad outcome is refused on publish; one stored with a bad field is dead-lettered with the reason, the good ones read", async () => {
  await withChannels(async (ch, dlq) => {
    const good = outcomeOf(task, { outcome: "filtered", rows: 0, rewards: [0, 0, 0, 0] });
    await assert.rejects(ch.groups.publish({ ...good, passRate: 1.5 }), /passRate/);
    await assert.rejects(ch.groups.publish({ ...good, outcome: "dropped" as never }), /outcome/);
    // What a foreign or broken producer could store: the schema is not asked on the way in.
    const js = ch.wire.js;
    await js.publish(ch.groups.subject, encode({ ...good, taskId: "fb:0:4", passRate: "high" }));
    await ch.groups.publish(good);
    const again = await ch.groups.publish(good);
    assert.equal(again.duplicate, true, "a group scored again after a redelivery is one outcome");
    const reader = ch.groups.reader(1, { deadLetterAs: "orchestrator" });
    try {
      const bad = await reader.next(3000);
      assert.ok(bad && "error" in bad, "the bad outcome is not handed on as a value");
      assert.match(bad.error, /passRate/);
      const ok = await reader.next(3000);
      assert.ok(ok && "value" in ok);
      assert.deepEqual(ok.value, good);
      assert.equal(await reader.next(300), null, "stored once");
    } finally {
      await reader.close();
    }
    const dead = await dlq();
    assert.equal(dead.length, 1);
    assert.equal(dead[0]!.subject, ch.groups.subject);
    assert.match(dead[0]!.reason, /^group outcome: .*passRate/);
  });
});

test("steps: a bad record is dead-lettered with the reason; a recomputed step is a record of its own and the last one wins", async () => {
  await withChannels(async (ch, dlq) => {
    const first = stepRecordOf("fb", 1, 3, { loss: 0.5, seqs: [4, 7] });
    await assert.rejects(ch.steps.publish({ ...first, seqs: [0] }), /seqs/);
    await ch.steps.publish(first);
    assert.equal((await ch.steps.publish(first)).duplicate, true, "a retried publish of one record is stored once");
    const js = ch.wire.js;
    await js.publish(ch.steps.subject, encode({ ...first, step: 2, loss: "NaN" }));
    const redone = { ...first, time: first.time + 1, loss: 0.25 };
    await ch.steps.publish(redone);
    const records = await readStepRecords(ch.steps, { deadLetterAs: "learner", firstWaitMs: 1000 });
    assert.deepEqual([...records.keys()], [1]);
    assert.equal(records.get(1)!.loss, 0.25, "the last record of a step wins");
    const dead = await dlq();
    assert.equal(dead.length, 1);
    assert.match(dead[0]!.reason, /^step record: .*loss/);
    // Control: without deadLetterAs nothing is dead-lettered, though the bad record is still passed over.
    await readStepRecords(ch.steps, { firstWaitMs: 1000 });
    assert.equal((await dlq()).length, 1);
  });
});
