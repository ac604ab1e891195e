import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { startTestNats } from "./nats.js";

test("test nats-server starts with JetStream and an 8 MB max payload, and stops", async () => {
  const srv = await startTestNats();
  try {
    const nc = await connect({ servers: srv.url });
    assert.equal(nc.info?.max_payload, 8 * 1024 * 1024);
    const jsm = await jetstreamManager(nc);
    const info = await jsm.getAccountInfo();
    assert.ok(info.limits !== undefined);
    await nc.close();
  } finally {
    await srv.cleanup();
  }
  assert.notEqual(srv.process.exitCode ?? srv.process.signalCode, null);
});
