// startNatsServer against a port taken between freePort() and nats-server's bind (a CI flake): a port it chose
// itself is chosen again; a port the caller named is the caller's, reported in one line with the reason.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, startNatsServer } from "../../deploy/local/nats-server.js";

async function holdPort(): Promise<{ port: number; server: Server }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const addr = server.address();
  if (addr === null || typeof addr === "string") throw new Error("no port");
  return { port: addr.port, server };
}

test("a chosen monitor port taken before nats-server binds it is chosen again", async () => {
  const held = await holdPort();
  const dir = mkdtempSync(join(tmpdir(), "rs-nats-ports-"));
  // The first two picks are the client port (free) and the monitor port (held by us): the race, forced.
  const picks: number[] = [];
  let calls = 0;
  const pickPort = async () => {
    calls++;
    const p = calls === 2 ? held.port : await freePort();
    picks.push(p);
    return p;
  };
  try {
    const srv = await startNatsServer({ storeDir: join(dir, "store"), pickPort });
    try {
      assert.equal(picks[1], held.port, "the held port was handed out as the monitor port");
      assert.ok(calls >= 4, `chose ports again after the bind failed (${calls} picks)`);
      assert.notEqual(srv.monitorPort, held.port);
      const varz = (await (await fetch(`http://127.0.0.1:${srv.monitorPort}/varz`)).json()) as { port: number };
      assert.equal(varz.port, srv.port);
    } finally {
      await srv.stop();
    }
  } finally {
    held.server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a named port that is taken fails at once with the reason (control: it is not retried)", async () => {
  const held = await holdPort();
  const dir = mkdtempSync(join(tmpdir(), "rs-nats-ports-"));
  let calls = 0;
  const pickPort = async () => {
    calls++;
    return freePort();
  };
  try {
    await assert.rejects(startNatsServer({ storeDir: join(dir, "store"), monitorPort: held.port, pickPort }), (e: Error) => {
      assert.match(e.message, new RegExp(`127\\.0\\.0\\.1:${held.port}: bind: address already in use`));
      return true;
    });
    assert.equal(calls, 1, "only the client port was picked, once");
  } finally {
    held.server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
