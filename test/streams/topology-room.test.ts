// A server whose JetStream storage cannot reserve the run's events stream (its max storage is set from its
// disk's free space when it starts): ensureTopology says so in one line naming the stream, its cap and the
// setting to lower, not "insufficient storage resources available" alone; a cap that fits is taken.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { ensureTopology } from "../../streams/index.js";
import { DiskFullError } from "../../streams/infrastructure-error.js";
import { startTestNats } from "../helpers/nats.js";

test("an events cap the server cannot reserve is a one-line disk-full error naming the setting; one that fits works", async () => {
  const nats = await startTestNats({ maxFileStoreBytes: 64 * 2 ** 20 });
  const nc = await connect({ servers: nats.url });
  try {
    const e = await ensureTopology(nc, "small", {}).then(
      () => null,
      (x: unknown) => x,
    );
    assert.ok(e instanceof DiskFullError, `a DiskFullError, not ${String(e)}`);
    assert.match(e.message, /^disk full: the NATS server has no room to reserve stream \S+ \(its cap of 1024 MiB\); .*lower nats\.eventsMaxBytes/);
    assert.ok(!e.message.includes("\n"));
    // Control: the same server takes the run with a cap it can hold.
    const topo = await ensureTopology(nc, "small", { eventsMaxBytes: 16 * 2 ** 20 });
    assert.equal((await topo.jsm.streams.info(topo.names.streams.events)).config.max_bytes, 16 * 2 ** 20);
  } finally {
    await nc.close();
    await nats.cleanup();
  }
});
