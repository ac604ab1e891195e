// The learner's ordered reader: messages in order from a position, handed over as soon as they are
// stored (never held back to fill a pull batch), and the same sequence after the server restarts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { startTestNats } from "../helpers/nats.js";
import { startNatsServer } from "../../deploy/local/nats-server.js";
import { ensureTopology } from "../../streams/topology.js";
import { StreamReader } from "../../streams/stream-reader.js";

const text = (d: Uint8Array) => new TextDecoder().decode(d);

test("a reader returns each message as soon as it is stored, in order, from its position", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const topo = await ensureTopology(nc, "reader");
    const js = jetstream(nc);
    const subject = topo.names.subjects.rolloutsScored;
    // Interleaved with another subject of the same stream, which the reader must skip.
    for (let i = 0; i < 3; i++) {
      await js.publish(subject, new TextEncoder().encode(`m${i}`));
      await js.publish(topo.names.subjects.rolloutsRaw, new TextEncoder().encode(`raw${i}`));
    }
    const reader = new StreamReader(js, { stream: topo.names.streams.rollouts, subject, fromSeq: 1, batch: 8 });
    try {
      // Fewer messages than the pull batch are stored: they must not wait for the batch to fill.
      let t = Date.now();
      const got: string[] = [];
      for (let i = 0; i < 3; i++) got.push(text((await reader.next(10_000))!.data));
      assert.deepEqual(got, ["m0", "m1", "m2"]);
      assert.ok(Date.now() - t < 800, `three stored messages took ${Date.now() - t} ms`);
      assert.equal(reader.position, 6);

      // Nothing stored: null after about waitMs, not later.
      t = Date.now();
      assert.equal(await reader.next(300), null);
      assert.ok(Date.now() - t < 1200, `an empty wait of 300 ms took ${Date.now() - t} ms`);

      // A message published while the reader waits arrives promptly.
      setTimeout(() => void js.publish(subject, new TextEncoder().encode("late")), 200);
      t = Date.now();
      const late = await reader.next(10_000);
      assert.equal(text(late!.data), "late");
      assert.ok(Date.now() - t < 1000, `a message published 200 ms into the wait arrived after ${Date.now() - t} ms`);

      // An abort ends the wait.
      const ac = new AbortController();
      setTimeout(() => ac.abort(), 100);
      t = Date.now();
      assert.equal(await reader.next(10_000, ac.signal), null);
      assert.ok(Date.now() - t < 1000);
    } finally {
      await reader.close();
    }
    // A second reader from a later position sees only what follows it.
    const from = new StreamReader(js, { stream: topo.names.streams.rollouts, subject, fromSeq: 3 });
    try {
      assert.equal(text((await from.next(5000))!.data), "m1");
    } finally {
      await from.close();
    }
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});

test("a reader carries on at its position after the server restarts (its consumer is gone)", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  try {
    const topo = await ensureTopology(nc, "reader2");
    const js = jetstream(nc);
    const subject = topo.names.subjects.rolloutsScored;
    for (let i = 0; i < 4; i++) await js.publish(subject, new TextEncoder().encode(`m${i}`));
    const reader = new StreamReader(js, { stream: topo.names.streams.rollouts, subject, fromSeq: 1, batch: 2 });
    try {
      assert.equal(text((await reader.next(5000))!.data), "m0");
      assert.equal(text((await reader.next(5000))!.data), "m1");
      // Restart on the same store and port: the reader's in-memory consumer does not survive.
      await srv.stop();
      const again = await startNatsServer({ storeDir: srv.storeDir, port: srv.port });
      try {
        await js.publish(subject, new TextEncoder().encode("m4")).catch(async () => {
          await new Promise((r) => setTimeout(r, 1000));
          await js.publish(subject, new TextEncoder().encode("m4"));
        });
        const got: string[] = [];
        while (got.length < 3) {
          const m = await reader.next(15_000);
          assert.ok(m, `reader stalled after ${JSON.stringify(got)}`);
          got.push(text(m.data));
        }
        assert.deepEqual(got, ["m2", "m3", "m4"], "no message skipped or repeated across the restart");
      } finally {
        await reader.close().catch(() => undefined);
        await nc.close();
        await again.stop();
      }
    } finally {
      await reader.close().catch(() => undefined);
    }
  } finally {
    await nc.close().catch(() => undefined);
    await srv.cleanup();
  }
});
