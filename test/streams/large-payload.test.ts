// Payloads past max_payload go through the blob bucket; the stream keeps a pointer readers resolve.
// Also: header padding makes large inline payloads arrive 8-byte aligned (zero-copy Arrow decode).
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { connect, headers } from "@nats-io/transport-node";
import { jetstream, type JsMsg } from "@nats-io/jetstream";
import { startTestNats } from "../helpers/nats.js";
import { ensureTopology } from "../../streams/topology.js";
import { alignPayload, Hdr, makeHeaders, MSG_ID_HEADER } from "../../streams/headers.js";
import { blobOf, DEAD_LETTER_HEADROOM_BYTES, publishPayload, readPayload } from "../../streams/large-payload.js";
import { openWire } from "../../streams/wire.js";
import { isPoison } from "../../streams/dead-letter.js";

const MAX_PAYLOAD = 64 * 1024;

/** Reads the next `n` messages of the run's rollouts stream from its start (ephemeral consumer). */
async function readAll(js: ReturnType<typeof jetstream>, stream: string, n: number): Promise<JsMsg[]> {
  const consumer = await js.consumers.get(stream);
  const out: JsMsg[] = [];
  const it = await consumer.consume({ max_messages: 8, expires: 1000 });
  for await (const m of it) {
    out.push(m);
    if (out.length === n) break;
  }
  await it.close();
  return out;
}

test("alignPayload makes the header block a multiple of 8 bytes, whatever the headers", () => {
  for (let extra = 0; extra < 24; extra++) {
    const h = makeHeaders({ run: "r", kind: "x".repeat(extra + 1), rows: extra });
    h.set(MSG_ID_HEADER, `id-${"y".repeat(extra)}`);
    const len = alignPayload(h);
    assert.equal(len % 8, 0);
    assert.equal(Buffer.byteLength(String(h)), len);
    assert.equal(alignPayload(h), len, "idempotent: a second call keeps one pad header of the same size");
    assert.equal(h.values(Hdr.pad).length, 1);
  }
});

test("payloads within max_payload go inline (aligned when asked); larger ones through the blob bucket, read back intact", async () => {
  const srv = await startTestNats({ maxPayloadBytes: MAX_PAYLOAD });
  const nc = await connect({ servers: srv.url });
  try {
    assert.equal(nc.info?.max_payload, MAX_PAYLOAD);
    const topo = await ensureTopology(nc, "blob");
    const js = jetstream(nc);
    const subject = topo.names.subjects.rolloutsRaw;
    const small = randomBytes(40 * 1024);
    // Inline iff headers + payload + the dead-letter headroom fit in max_payload: one byte decides.
    const h0 = makeHeaders({ run: "blob", kind: "test" });
    h0.set(MSG_ID_HEADER, "exact");
    const exact = randomBytes(MAX_PAYLOAD - DEAD_LETTER_HEADROOM_BYTES - Buffer.byteLength(String(h0)));
    const over = randomBytes(exact.byteLength + 1);
    const large = randomBytes(5 * MAX_PAYLOAD + 123);
    const publish = (data: Uint8Array, msgId: string, align = false) =>
      publishPayload(js, topo.blobs, subject, data, { headers: makeHeaders({ run: "blob", kind: "test" }), msgId, maxPayload: MAX_PAYLOAD, align });

    const a = await publish(small, "small", true);
    assert.equal(a.blob, undefined);
    const b = await publish(exact, "exact");
    assert.equal(b.blob, undefined, "a payload at the limit stays inline");
    const o = await publish(over, "over1");
    assert.ok(o.blob, "one byte more goes to the blob bucket");
    const c = await publish(large, "large");
    assert.ok(c.blob?.startsWith("large."), `large payload went to a blob: ${String(c.blob)}`);
    // A retry of the same message (same msg-id, same bytes) is de-duplicated and writes no second blob.
    const again = await publish(large, "large");
    assert.equal(again.ack.duplicate, true);
    assert.equal(again.blob, c.blob);

    const msgs = await readAll(js, topo.names.streams.rollouts, 4);
    assert.deepEqual(
      msgs.map((m) => m.headers?.get(MSG_ID_HEADER)),
      ["small", "exact", "over1", "large"],
    );
    const [ms, me, mo, ml] = msgs as [JsMsg, JsMsg, JsMsg, JsMsg];
    assert.deepEqual(Buffer.from(await readPayload(ms, topo.blobs)), small);
    assert.equal(blobOf(me), undefined);
    assert.equal(me.data.byteLength, exact.byteLength);
    assert.deepEqual(Buffer.from(await readPayload(me, topo.blobs)), exact);
    assert.deepEqual(Buffer.from(await readPayload(mo, topo.blobs)), over);
    assert.equal(ml.data.byteLength, 0, "a pointer carries no payload of its own");
    assert.equal(blobOf(ml), c.blob);
    assert.equal(ml.headers?.get(Hdr.blobBytes), String(large.byteLength));
    assert.equal(ml.headers?.get("Rs-Run"), "blob", "the producer's headers stay on the pointer");
    assert.deepEqual(Buffer.from(await readPayload(ml, topo.blobs)), large);
    assert.deepEqual(Buffer.from(await readPayload(ml, openWire(nc, "blob").blobs)), large);
    const listed = (await topo.blobs.list()).map((i) => i.name);
    assert.deepEqual(listed.sort(), [c.blob, o.blob].sort());
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});

test("a pointer whose blob is missing, corrupt or badly described is a poison message with the reason", async () => {
  const srv = await startTestNats({ maxPayloadBytes: MAX_PAYLOAD });
  const nc = await connect({ servers: srv.url });
  try {
    const topo = await ensureTopology(nc, "blobbad");
    const js = jetstream(nc);
    const data = randomBytes(3 * MAX_PAYLOAD);
    const { blob } = await publishPayload(js, topo.blobs, topo.names.subjects.rolloutsRaw, data, {
      headers: makeHeaders({ run: "blobbad" }),
      msgId: "m1",
      maxPayload: MAX_PAYLOAD,
    });
    const [msg] = await readAll(js, topo.names.streams.rollouts, 1);
    const pointer = (edit: (h: ReturnType<typeof headers>) => void) => {
      const h = headers();
      for (const [k, v] of msg!.headers!) for (const one of v) h.append(k, one);
      edit(h);
      return { data: msg!.data, headers: h };
    };
    const expectPoison = async (m: Parameters<typeof readPayload>[0], pattern: RegExp) => {
      const err = await readPayload(m, topo.blobs).then(
        () => undefined,
        (e: Error) => e,
      );
      assert.ok(err, `expected a failure matching ${pattern}`);
      assert.ok(isPoison(err), `${err.name}: ${err.message} should be poison (dead-lettered, not retried)`);
      assert.match(err.message, pattern);
    };
    await expectPoison(
      pointer((h) => h.set(Hdr.blobSha256, "0".repeat(64))),
      /does not match the SHA-256/,
    );
    await expectPoison(
      pointer((h) => h.set(Hdr.blobBytes, "12")),
      /has \d+ bytes, its pointer says 12/,
    );
    await expectPoison(
      pointer((h) => h.set(Hdr.blobBytes, "lots")),
      /no valid Rs-Blob-Bytes/,
    );
    await expectPoison(
      pointer((h) => h.set(Hdr.blob, "no-such-blob")),
      /missing from the run's blob bucket/,
    );
    await topo.blobs.delete(blob!);
    await expectPoison(msg!, /missing/);
    await expectPoison(msg!, /missing/);
    const noBucket = openWire(nc, "nobody").blobs;
    const err = await readPayload(msg!, noBucket).then(
      () => undefined,
      (e: Error) => e,
    );
    assert.ok(err && isPoison(err) && /cannot be opened/.test(err.message), String(err?.message));
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});

test("padded headers land payloads that span socket reads 8-byte aligned, so Arrow decodes them in place", async () => {
  const srv = await startTestNats(); // 8 MB max payload, as deploy/local runs it
  const nc = await connect({ servers: srv.url });
  try {
    const topo = await ensureTopology(nc, "align");
    const js = jetstream(nc);
    const sizes = [1_000_001, 2_345_679, 700_003, 3_000_005];
    for (const [i, n] of sizes.entries()) {
      // Header lengths that differ by a byte each, so alignment cannot come from luck.
      await publishPayload(js, topo.blobs, topo.names.subjects.rolloutsScored, randomBytes(n), {
        headers: makeHeaders({ run: "align", kind: "k".repeat(i + 1) }),
        msgId: `a${i}`,
        maxPayload: nc.info!.max_payload,
        align: true,
      });
    }
    const msgs = await readAll(js, topo.names.streams.rollouts, sizes.length);
    assert.deepEqual(
      msgs.map((m) => m.data.byteLength),
      sizes,
    );
    assert.deepEqual(
      msgs.map((m) => m.data.byteOffset % 8),
      sizes.map(() => 0),
    );
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});
