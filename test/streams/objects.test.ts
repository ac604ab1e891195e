// Objects (policy weights, training states) are read back byte for byte with direct gets, across chunk
// boundaries, and leave no consumer on the server; the client's own get, the control, leaves one behind.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Objm } from "@nats-io/obj";
import { startTestNats } from "../helpers/nats.js";
import { getObject, putObject } from "../../streams/channels/objects.js";

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
