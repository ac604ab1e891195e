// What doctor reports of the work consumers: pending and unacked counts, and the oldest unfinished
// message (ack floor + 1 on the consumer's subject, even in a stream that interleaves other subjects).
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { startTestNats } from "../helpers/nats.js";
import { ensureTopology } from "../../streams/topology.js";
import { consumerBacklogs } from "../../streams/consumer-backlog.js";

test("consumer backlogs name the oldest unfinished message of each durable consumer", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const t = await ensureTopology(nc, "backlog");
    const js = jetstream(nc);
    const n = t.names;
    const idle = await consumerBacklogs(t.wire);
    assert.deepEqual(idle.map((c) => [c.consumer, c.subject, c.pending, c.ackPending, c.oldest]).sort(), [
      ["checkpoint", n.subjects.checkpoints, 0, 0, null],
      ["inference", n.subjects.tasks, 0, 0, null],
      ["reward", n.subjects.rolloutsRaw, 0, 0, null],
    ]);
    // Scored batches interleave with raw groups in the rollouts stream: the oldest raw one is found past them.
    await js.publish(n.subjects.rolloutsScored, new Uint8Array([0]));
    for (const id of ["backlog:0:0", "backlog:0:1", "backlog:0:2"]) {
      await js.publish(n.subjects.tasks, new Uint8Array([1]), { msgID: id });
      await js.publish(n.subjects.rolloutsRaw, new Uint8Array([2]), { msgID: `raw:${id}` });
    }
    const tasks = await js.consumers.get(n.streams.tasks, n.consumers.inference);
    const first = await tasks.next();
    const rewards = await js.consumers.get(n.streams.rollouts, n.consumers.reward);
    const raw = await rewards.next();
    await raw!.ackAck();
    const b = Object.fromEntries((await consumerBacklogs(t.wire)).map((c) => [c.consumer, c]));
    assert.deepEqual([b.inference!.pending, b.inference!.ackPending], [2, 1]);
    assert.equal(b.inference!.oldest?.msgId, "backlog:0:0", "the delivered, unacked task is the oldest");
    assert.ok(b.inference!.oldest!.ageMs >= 0 && b.inference!.oldest!.ageMs < 60_000);
    assert.deepEqual([b.reward!.pending, b.reward!.ackPending, b.reward!.oldest?.msgId], [2, 0, "raw:backlog:0:1"]);
    assert.equal(b.reward!.oldest?.subject, n.subjects.rolloutsRaw);
    await first!.ackAck();
    const c = Object.fromEntries((await consumerBacklogs(t.wire)).map((x) => [x.consumer, x]));
    assert.equal(c.inference!.oldest?.msgId, "backlog:0:1");
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});
