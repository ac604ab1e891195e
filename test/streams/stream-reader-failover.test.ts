// The ordered reader on a 3-server cluster: when the server holding its consumer is SIGKILLed (and stays
// down), the reader opens a new consumer on a live server within seconds and goes on from its position,
// nothing skipped, nothing twice. Control: a reader that leaves the lost consumer to the client library
// (heartbeatMs 0) hears nothing for 25 s; that was a learner starving on a cluster.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { startCluster, waitForMetaLeader } from "../helpers/nats-cluster.js";
import { waitUntil } from "../helpers/run-fixture.js";
import { StreamReader } from "../../streams/stream-reader.js";

const STREAM = "FAILOVER";
const SUBJECT = "fo.data";
const text = (d: Uint8Array) => new TextDecoder().decode(d);
const CONTROL_WINDOW_MS = 25_000;

async function consumerHosts(jsm: JetStreamManager): Promise<Map<string, string>> {
  const hosts = new Map<string, string>();
  for await (const c of jsm.consumers.list(STREAM)) hosts.set(c.name, c.cluster?.leader ?? "");
  return hosts;
}

test("a reader whose consumer's server is killed reads on from a new consumer; the library alone stays silent", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-reader-failover-"));
  const cluster = await startCluster(dir);
  const nc = await connect({ servers: cluster.url.split(","), maxReconnectAttempts: -1, reconnectTimeWait: 250 });
  const readers: StreamReader[] = [];
  /** What the readers reported, ms after the kill: printed, so a slow recovery says where its time went. */
  const trouble: string[] = [];
  let killedAt = Date.now();
  try {
    await waitForMetaLeader(nc);
    const jsm = await jetstreamManager(nc, { checkAPI: false });
    const js = jetstream(nc);
    await waitUntil(
      "an R3 stream",
      () =>
        jsm.streams.add({ name: STREAM, subjects: ["fo.>"], num_replicas: 3 }).then(
          () => true,
          () => false,
        ),
      30_000,
    );
    // Publishes are retried while the cluster elects a new stream leader.
    const publish = (body: string) =>
      waitUntil(
        `publish ${body}`,
        () =>
          js.publish(SUBJECT, body).then(
            () => true,
            () => false,
          ),
        30_000,
      );
    for (const m of ["m0", "m1", "m2"]) await publish(m);

    // Each reader's consumer is found by listing the stream's consumers before and after its first read.
    const open = async (heartbeatMs?: number): Promise<{ reader: StreamReader; host: string }> => {
      const before = await consumerHosts(jsm);
      const reader = new StreamReader(js, {
        stream: STREAM,
        subject: SUBJECT,
        fromSeq: 1,
        ...(heartbeatMs === undefined ? {} : { heartbeatMs }),
        onTrouble: (what) => trouble.push(`${Date.now() - killedAt} ms: ${what}`),
      });
      readers.push(reader);
      assert.equal(text((await reader.next(10_000))!.data), "m0");
      const after = await consumerHosts(jsm);
      const name = [...after.keys()].find((n) => !before.has(n));
      assert.ok(name, "the reader's consumer is listed");
      return { reader, host: after.get(name)! };
    };
    const watched = await open();
    // The control must sit on the same server; R1 consumers are placed among the stream's peers.
    let control = await open(0);
    const placed = [control.host];
    for (let i = 0; i < 30 && control.host !== watched.host; i++) {
      await control.reader.close();
      control = await open(0);
      placed.push(control.host);
    }
    assert.equal(control.host, watched.host, `a control consumer on ${watched.host}, where the watched one is; they were placed on ${placed.join(",")}`);
    for (const r of [watched.reader, control.reader]) assert.equal(text((await r.next(5_000))!.data), "m1");

    const victim = Number(watched.host.slice(1));
    cluster.servers[victim]!.process.kill("SIGKILL");
    cluster.servers[victim] = null;
    killedAt = Date.now();
    trouble.length = 0;
    let publishedAt = 0;
    const published = (async () => {
      for (const m of ["m3", "m4"]) await publish(m);
      publishedAt = Date.now() - killedAt;
    })();
    // The control reads for 25 s after the kill, beside the watched reader: the client's own check of
    // its heartbeats begins only at 30 s (2 x half its 30 s pull), and a learner left to it in the
    // cluster test was still starving 90 s after the kill.
    const controlGot: string[] = [];
    const controlRead = (async () => {
      while (Date.now() - killedAt < CONTROL_WINDOW_MS) {
        const m = await control.reader.next(500);
        if (m) controlGot.push(text(m.data));
      }
    })();

    const got: string[] = [];
    while (got.length < 3 && Date.now() - killedAt < 60_000) {
      const m = await watched.reader.next(1_000);
      if (m) got.push(text(m.data));
    }
    const recoveredMs = Date.now() - killedAt;
    await published;
    await controlRead;
    assert.deepEqual(got, ["m2", "m3", "m4"], `the watched reader goes on in order, nothing skipped or repeated; it reported: ${trouble.join("; ")}`);
    assert.ok(watched.reader.reopened >= 1, "it opened a new consumer");
    assert.ok(publishedAt < CONTROL_WINDOW_MS - 5_000, `m4 was stored ${publishedAt} ms after the kill: too late for the control to show anything`);
    assert.ok(
      !controlGot.includes("m4"),
      `the control read ${controlGot.join(",")} within ${CONTROL_WINDOW_MS} ms of the kill: the test no longer shows the stall`,
    );
    console.log(
      `watched reader recovered ${recoveredMs} ms after the kill (m4 stored at ${publishedAt} ms); the control read [${controlGot.join(",")}] in ${CONTROL_WINDOW_MS} ms; ${trouble.join("; ")}`,
    );
  } finally {
    for (const r of readers) await r.close().catch(() => undefined);
    await nc.close();
    await Promise.all(cluster.servers.map((s) => s?.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
});
