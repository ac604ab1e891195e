// `rollstream doctor` as a person runs it, on runs set up by hand: a healthy run in words, and every way it
// can fail to read one (bad usage, no server, no such run, a run without heartbeats) as one clear line
// with the right exit code and no stack trace.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { startTestNats } from "../helpers/nats.js";
import { cliMain } from "../helpers/run-fixture.js";
import { ensureTopology } from "../../streams/topology.js";
import { HealthBoard } from "../../streams/index.js";
import { Health } from "../../actors/runtime/heartbeat.js";

function doctor(...args: string[]) {
  const r = spawnSync(process.execPath, [cliMain, "doctor", ...args], { encoding: "utf8", timeout: 30_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

test("doctor prints a healthy run's actors, and fails clearly on bad usage, no server, no run, no heartbeats", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const t = await ensureTopology(nc, "cli-ok");
    const h = new Health({ actor: "learner", instance: "learner-0", board: new HealthBoard(t.wire.health), lastLog: () => null });
    const waiting = h.waiting("samples", { detail: "for step 3 (2 of 8)" });
    h.start();
    await new Promise((r) => setTimeout(r, 300));
    const ok = doctor("--run", "cli-ok", "--nats", srv.url);
    assert.equal(ok.code, 0, ok.out + ok.err);
    assert.match(ok.out, /^run cli-ok \(status unknown\) at nats:\/\/127\.0\.0\.1:\d+: healthy$/m);
    assert.match(ok.out, /^ {2}learner-0 +healthy +waiting +samples for step 3 \(2 of 8\) /m);
    assert.match(ok.out, /^ {2}inference +rs\.cli-ok\.tasks: 0 pending, 0 unacked/m);
    waiting.end();
    await h.stop(false);

    const usage = doctor("--nats", srv.url);
    assert.deepEqual([usage.code, usage.err], [2, "doctor: doctor needs --run or --config\n"]);
    assert.equal(doctor("--run", "x", "--stuck-ms", "-1").code, 2);
    assert.equal(doctor("--run", "x", "--no-such-flag").code, 2);

    const down = doctor("--run", "cli-ok", "--nats", "nats://127.0.0.1:1", "--json");
    assert.equal(down.code, 1);
    assert.match(down.err, /^doctor: cannot reach NATS at nats:\/\/127\.0\.0\.1:1: .*\n$/);
    assert.deepEqual(JSON.parse(down.out), { run: "cli-ok", healthy: false, error: down.err.slice("doctor: ".length, -1) });

    const missing = doctor("--run", "nope", "--nats", srv.url);
    assert.deepEqual([missing.code, missing.err], [1, `doctor: no run nope on ${srv.url} (no state bucket rs-nope-state)\n`]);

    // A run whose actors predate heartbeats: no health bucket.
    await ensureTopology(nc, "cli-old");
    await (await jetstreamManager(nc)).streams.delete("KV_rs-cli-old-health");
    const old = doctor("--run", "cli-old", "--nats", srv.url, "--json");
    assert.equal(old.code, 1, old.out + old.err);
    const report = JSON.parse(old.out);
    assert.equal(report.healthy, false);
    assert.match(report.problems[0], /has no health bucket rs-cli-old-health/);
    for (const r of [usage, down, missing, old]) assert.doesNotMatch(r.err, /\n\s+at /, "no stack trace");
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});

test("doctor shows an actor that exited cleanly as exited, not as still working on its last item", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const t = await ensureTopology(nc, "cli-exit");
    const board = new HealthBoard(t.wire.health);
    const learner = new Health({ actor: "learner", instance: "learner-0", board, lastLog: () => null });
    const reward = new Health({ actor: "reward", instance: "reward-0", board, lastLog: () => null });
    learner.working("publish weights v5");
    reward.working("group run:0:7");
    learner.start();
    reward.start();
    await new Promise((r) => setTimeout(r, 300));
    await learner.exit();

    const r = doctor("--run", "cli-exit", "--nats", srv.url);
    assert.equal(r.code, 0, r.out + r.err);
    assert.match(r.out, /^ {2}learner-0 +exited +exited +- /m);
    assert.doesNotMatch(r.out, /learner-0 .*(working|publish weights)/);
    // Control: the live one is shown working on its item.
    assert.match(r.out, /^ {2}reward-0 +healthy +working +group run:0:7 /m);
    const json = JSON.parse(doctor("--run", "cli-exit", "--nats", srv.url, "--json").out) as {
      instances: { instance: string; state: string; what?: string }[];
    };
    const exited = json.instances.find((i) => i.instance === "learner-0")!;
    assert.deepEqual([exited.state, exited.what], ["exited", undefined]);
    await reward.stop(false);
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});
