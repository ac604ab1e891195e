// Objects (policy weights, training states) are read back byte for byte with direct gets, across chunk
// boundaries, and leave no consumer on the server; the client's own get, the control, leaves one behind.
// A delete leaves nothing of the object in the stream and gives its bytes back to the server's count; the
// client's own delete, the control, leaves a "deleted" info message behind.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Objm } from "@nats-io/obj";
import { startTestNats } from "../helpers/nats.js";
import { deleteObject, getObject, objectNames, putObject } from "../../streams/channels/objects.js";

test("objects of 0 bytes to several chunks read back exactly, with no consumer left behind (the client's get leaves one)", async () => {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const store = await new Objm(nc).create("objtest");
    const sizes = [0, 10, 4 * 1024 * 1024, 9 * 1024 * 1024 + 7];
    for (const size of sizes) {
      const bytes = new Uint8Array(size);
      for (let i = 0; i < size; i++) bytes[i] = (i * 31 + size) & 255;
      await putObject(store, `o${size}`, bytes);
      const back = await getObject(store, `o${size}`, jsm);
      assert.equal(back.length, size);
      assert.ok(Buffer.from(back).equals(Buffer.from(bytes)), `object of ${size} bytes read back exactly`);
    }
    const consumers = async () => {
      let n = 0;
      for await (const _ of jsm.consumers.list("OBJ_objtest")) n++;
      return n;
    };
    assert.equal(await consumers(), 0, "direct gets create no consumer");
    await assert.rejects(getObject(store, "missing", jsm), /object missing is not in the object store/);
    // The control: the client's get streams through a consumer that stays until it expires.
    assert.ok((await store.getBlob("o10"))?.length === 10);
    assert.ok((await consumers()) >= 1, "the client's own get leaves a consumer (what the check above would catch)");
  } finally {
    await nc.close();
    await nats.cleanup();
  }
});

test("deleteObject leaves no message, consumer or counted byte of the object; the client's delete leaves its info behind", async () => {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const store = await new Objm(nc).create("deltest");
    const used = async () => (await jsm.getAccountInfo()).storage;
    await putObject(store, "small", new Uint8Array(10).fill(1));
    const before = await used();
    await putObject(store, "big", new Uint8Array(9 * 2 ** 20).fill(2)); // three chunks
    assert.deepEqual((await objectNames("deltest", jsm)).sort(), ["big", "small"]);
    assert.equal(await deleteObject(store, "big", jsm), true);
    assert.equal(await store.info("big"), null, "no info left, not even a deleted one");
    assert.deepEqual(await objectNames("deltest", jsm), ["small"]);
    assert.equal((await jsm.streams.info("OBJ_deltest")).state.messages, 2, "only the small object's chunk and info remain");
    assert.ok((await used()) <= before, `the server's count of stored bytes is back down (${await used()} <= ${before})`);
    assert.equal(await deleteObject(store, "big", jsm), false, "deleting it again finds nothing");
    assert.equal((await jsm.streams.info("OBJ_deltest")).state.consumer_count, 0, "the consumer that found the chunks is gone");
    assert.equal((await getObject(store, "small", jsm)).length, 10, "the other object is whole");

    // The control: the client's delete keeps a "deleted" info message; deleteObject then clears it.
    await putObject(store, "old", new Uint8Array(100));
    await store.delete("old");
    assert.equal((await store.info("old"))?.deleted, true);
    assert.deepEqual((await objectNames("deltest", jsm)).sort(), ["old", "small"], "the client's delete leaves the name in the stream");
    assert.equal(await deleteObject(store, "old", jsm), false, "already deleted: nothing to report");
    assert.deepEqual(await objectNames("deltest", jsm), ["small"], "its leftover info is gone too");
  } finally {
    await nc.close();
    await nats.cleanup();
  }
});
