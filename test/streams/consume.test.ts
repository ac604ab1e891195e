import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { lastValueFrom, take, toArray } from "rxjs";
import { z } from "zod";
import { startTestNats } from "../helpers/nats.js";
import { ensureTopology } from "../../streams/topology.js";
import { handleWith, pullSlots } from "../../streams/consume.js";
import { decodeMsgpack, encodeMsgpack, MessageValidationError } from "../../streams/msgpack-codec.js";
import { Hdr, makeHeaders } from "../../streams/headers.js";

const Item = z.object({ n: z.number().int() });

test("malformed messages go to the dead-letter subject with the reason and payload; the loop goes on", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const topo = await ensureTopology(nc, "dlq");
    const js = jetstream(nc);
    const subj = topo.names.subjects.tasks;
    const good = (n: number) => encodeMsgpack(Item, { n });
    const garbage = new TextEncoder().encode("this is not msgpack \u0000\u00ff");
    const wrongShape = encodeMsgpack(z.object({ m: z.string() }), { m: "x" });
    await js.publish(subj, good(1), { headers: makeHeaders({ run: "dlq" }) });
    await js.publish(subj, garbage);
    await js.publish(subj, good(2));
    await js.publish(subj, wrongShape);
    await js.publish(subj, good(3));

    const seen: number[] = [];
    const consumer = await js.consumers.get(topo.names.streams.tasks, topo.names.consumers.inference);
    const outcomes = await lastValueFrom(
      pullSlots(consumer, { maxInFlight: 2, expiresMs: 1000 }).pipe(
        handleWith(
          async (m) => {
            seen.push(decodeMsgpack(Item, m.data, "item").n);
          },
          { js, dlqSubject: topo.names.subjects.dlq, actor: "test", maxInFlight: 2 },
        ),
        take(5),
        toArray(),
      ),
    );
    assert.deepEqual(seen.sort(), [1, 2, 3]);
    assert.equal(outcomes.filter((o) => o.kind === "acked").length, 3);
    assert.equal(outcomes.filter((o) => o.kind === "dead-lettered").length, 2);

    const events = await topo.jsm.streams.info(topo.names.streams.events, { subjects_filter: topo.names.subjects.dlq });
    assert.equal(events.state.subjects?.[topo.names.subjects.dlq], 2);
    const dl = await topo.jsm.streams.getMessage(topo.names.streams.events, { last_by_subj: topo.names.subjects.dlq });
    assert.ok(dl);
    assert.deepEqual(dl.data, wrongShape, "the original payload is kept");
    assert.match(dl.header.get(Hdr.error), /n: /);
    assert.equal(dl.header.get(Hdr.originalSubject), subj);
    // Acked and terminated messages are settled: nothing left pending for the consumer.
    // (term is fire-and-forget, so give it a moment to reach the server.)
    await nc.flush();
    let pending = -1;
    for (let i = 0; i < 20 && pending !== 0; i++) {
      const info = await topo.jsm.consumers.info(topo.names.streams.tasks, topo.names.consumers.inference);
      pending = info.num_pending + info.num_ack_pending;
      if (pending !== 0) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(pending, 0);
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});

test("a transient failure is redelivered and then succeeds; in-flight work never exceeds the bound", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const topo = await ensureTopology(nc, "retry");
    const js = jetstream(nc);
    for (let i = 0; i < 6; i++) await js.publish(topo.names.subjects.tasks, encodeMsgpack(Item, { n: i }));
    let failOnce = true;
    let inFlight = 0,
      maxSeen = 0;
    const done: number[] = [];
    const consumer = await js.consumers.get(topo.names.streams.tasks, topo.names.consumers.inference);
    const outcomes = await lastValueFrom(
      pullSlots(consumer, { maxInFlight: 3, expiresMs: 1000 }).pipe(
        handleWith(
          async (m) => {
            inFlight++;
            maxSeen = Math.max(maxSeen, inFlight);
            try {
              await new Promise((r) => setTimeout(r, 30));
              const { n } = decodeMsgpack(Item, m.data);
              if (n === 4 && failOnce) {
                failOnce = false;
                throw new Error("temporarily unavailable");
              }
              done.push(n);
            } finally {
              inFlight--;
            }
          },
          { js, dlqSubject: topo.names.subjects.dlq, actor: "test", maxInFlight: 3, nakBaseMs: 50 },
        ),
        take(7),
        toArray(),
      ),
    );
    assert.deepEqual(done.sort(), [0, 1, 2, 3, 4, 5]);
    assert.equal(outcomes.filter((o) => o.kind === "nacked").length, 1);
    assert.ok(maxSeen <= 3, `in flight ${maxSeen} > 3`);
    assert.ok(MessageValidationError);
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});

test("a failure of the messaging system is retried on the message in hand, not spent on its deliveries", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const topo = await ensureTopology(nc, "infra");
    const js = jetstream(nc);
    await js.publish(topo.names.subjects.tasks, encodeMsgpack(Item, { n: 7 }));
    let failures = 2;
    const deliveries: number[] = [];
    const consumer = await js.consumers.get(topo.names.streams.tasks, topo.names.consumers.inference);
    const outcomes = await lastValueFrom(
      pullSlots(consumer, { maxInFlight: 1, expiresMs: 1000 }).pipe(
        handleWith(
          async (m) => {
            deliveries.push(m.info.deliveryCount);
            if (failures-- > 0) {
              // What nats.js throws while a cluster has no JetStream leader (seen in test/integration/cluster).
              const e = new Error("jetstream is not enabled");
              e.name = "JetStreamNotEnabled";
              throw e;
            }
          },
          // maxDeliver 2: had the two failures each spent a delivery, the message would have been set aside.
          { js, dlqSubject: topo.names.subjects.dlq, actor: "test", maxInFlight: 1, nakBaseMs: 50, maxDeliver: 2 },
        ),
        take(1),
        toArray(),
      ),
    );
    assert.deepEqual(
      outcomes.map((o) => o.kind),
      ["acked"],
    );
    assert.deepEqual(deliveries, [1, 1, 1], "three runs of the handler on the first delivery");
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});
