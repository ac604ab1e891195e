// A NATS store whose disk fills under the server (a real ENOSPC: the store is a small tmpfs, filled by a file
// from outside, as another process on the host would). The watch train runs over a server it started says
// "disk full" once, naming the store's disk; once the file is gone it restarts a JetStream that stopped
// answering, and the run's data written before is all there. What Debian's nats-server does on its own is
// checked too (the premise): JetStream stops answering and freeing space does not bring it back.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { startNatsServer, type LocalNatsServer } from "../../deploy/local/nats-server.js";
import { superviseServer, type ServerHolder } from "../../cli/train/server.js";
import { jetStreamAnswers, watchStoreDisk } from "../../cli/train/store-watch.js";
import { waitUntil } from "../helpers/run-fixture.js";
import { fillDisk, mountTmpfs, whyNoTmpfs } from "../helpers/tmpfs.js";

const cannotMount = whyNoTmpfs();

const MiB = new Uint8Array(2 ** 20);

async function publishUntilRefused(nc: NatsConnection, max: number): Promise<number> {
  const js = jetstream(nc, { timeout: 2_000 });
  for (let i = 0; i < max; i++) {
    try {
      await js.publish("w.x", MiB);
    } catch {
      return i;
    }
  }
  return max;
}

test("the NATS store's disk fills under the server: one disk-full line, and JetStream is back once there is room, its data kept", {
  skip: cannotMount ?? false,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-store-full-"));
  assert.equal(mountTmpfs(dir, "48m"), null);
  const lines: string[] = [];
  let server: LocalNatsServer | null = null;
  const holder: { -readonly [K in keyof ServerHolder]: ServerHolder[K] } = { stopping: false, server: null, say: (l) => void lines.push(l) };
  let nc: NatsConnection | null = null;
  try {
    server = await startNatsServer({ storeDir: join(dir, "store"), maxPayloadBytes: 2 ** 21 });
    holder.server = server;
    nc = await connect({ servers: server.url, maxReconnectAttempts: -1, reconnectTimeWait: 200 });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "W", subjects: ["w.>"] });
    const js = jetstream(nc, { timeout: 2_000 });
    for (let i = 0; i < 4; i++) await js.publish("w.x", MiB);

    mkdirSync(join(dir, "logs"));
    const filler = fillDisk(dir);
    const written = 4 + (await publishUntilRefused(nc, 40));
    // The premise, before any watch: JetStream no longer answers, and freeing space alone does not bring it back.
    const wedged = !(await jetStreamAnswers(server.monitorPort, 3_000));
    superviseServer(holder, server, dir);
    const watching = watchStoreDisk(holder, { periodMs: 300, wedgedAfterMs: 3_000 });
    await waitUntil("the disk-full line", () => lines.some((l) => l.startsWith("disk full: the NATS store's disk")), 10_000);
    rmSync(filler);
    if (wedged) {
      await sleep(1_000);
      assert.equal(await jetStreamAnswers(server.monitorPort, 2_000), false, "room alone did not bring JetStream back");
      await waitUntil("the restart line", () => lines.some((l) => /restarting the run's nats-server on the same store/.test(l)), 20_000);
    }
    await waitUntil("JetStream answering", async () => holder.server !== null && (await jetStreamAnswers(holder.server.monitorPort, 1_000)), 30_000);
    // Every message acknowledged before the disk filled is still there, and the store takes writes again.
    await waitUntil("a write after the restart", async () => (await publishUntilRefused(nc!, 1)) === 1, 20_000);
    const info = await jsm.streams.info("W");
    assert.ok(info.state.messages >= written, `${info.state.messages} messages kept, ${written} were acknowledged`);
    assert.equal(lines.filter((l) => l.startsWith("disk full:")).length, 1, lines.join("\n"));
    holder.stopping = true;
    await watching;
  } finally {
    holder.stopping = true;
    await nc?.close().catch(() => undefined);
    await holder.server?.stop();
    if (server && server !== holder.server) await server.stop();
    spawnSync("umount", [dir]);
    rmSync(dir, { recursive: true, force: true });
  }
});
