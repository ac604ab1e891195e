// `rollstream doctor` on a 3-server cluster right after one server died: the moment people run it. It must
// answer within seconds and still name the run's actors (it read the health bucket from the surviving
// replicas), not hang on a consumer placed on the dead server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { startCluster, waitForMetaLeader } from "../helpers/nats-cluster.js";
import { cliMain } from "../helpers/run-fixture.js";
import { ensureTopology } from "../../streams/topology.js";
import { HealthBoard } from "../../streams/index.js";
import { Health } from "../../actors/runtime/heartbeat.js";

function doctor(...args: string[]): { code: number | null; out: string; err: string; ms: number } {
  const t0 = Date.now();
  const r = spawnSync(process.execPath, [cliMain, "doctor", ...args], { encoding: "utf8", timeout: 60_000 });
  return { code: r.status, out: r.stdout, err: r.stderr, ms: Date.now() - t0 };
}

test("doctor answers within seconds on a cluster that has just lost the health stream's leader", { timeout: 180_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-doctor-cluster-"));
  const cluster = await startCluster(dir);
  const nc = await connect({ servers: cluster.url.split(","), maxReconnectAttempts: -1, reconnectTimeWait: 250 });
  let health: Health | undefined;
  try {
    await waitForMetaLeader(nc);
    const t = await ensureTopology(nc, "dc", { replicas: 3 });
    health = new Health({ actor: "learner", instance: "learner-0", board: new HealthBoard(t.wire.health), lastLog: () => null });
    const waiting = health.waiting("samples", { detail: "for step 3 (2 of 8)" });
    health.start();
    await new Promise((r) => setTimeout(r, 500));
    waiting.end();
    await health.stop(false);
    health = undefined;

    // Control: on the whole cluster, doctor names the learner.
    const before = doctor("--run", "dc", "--nats", cluster.url, "--json");
    assert.ok(
      JSON.parse(before.out).instances.some((i: { actor: string }) => i.actor === "learner"),
      before.out + before.err,
    );

    const jsm = await jetstreamManager(nc);
    const leader = (await jsm.streams.info("KV_rs-dc-health")).cluster?.leader;
    const victim = Number(/^n(\d)$/.exec(leader ?? "")?.[1]);
    assert.ok(Number.isInteger(victim), `health stream leader ${leader}`);
    cluster.servers[victim]!.process.kill("SIGKILL");
    cluster.servers[victim] = null;
    const alive = cluster.url
      .split(",")
      .filter((_, i) => i !== victim)
      .join(",");

    const after = doctor("--run", "dc", "--nats", alive, "--json");
    console.log(`doctor after the leader's death: exit ${after.code} in ${after.ms} ms`);
    assert.notEqual(after.code, null, `doctor was still running after 60 s: ${after.err}`);
    assert.ok(after.ms < 20_000, `doctor took ${after.ms} ms`);
    const report = JSON.parse(after.out);
    assert.ok(
      report.instances?.some((i: { actor: string }) => i.actor === "learner"),
      `doctor read no heartbeat after the death of ${leader}: ${after.out}${after.err}`,
    );
    assert.doesNotMatch(after.err, /\n\s+at /, "no stack trace");
  } finally {
    await health?.stop(false).catch(() => {});
    await nc.close().catch(() => {});
    await Promise.all(cluster.servers.map((s) => s?.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
});
