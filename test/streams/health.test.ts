// The run's health bucket and the runtime piece that fills it: heartbeats are valid JSON a reader checks
// against the schema, a clean exit leaves only the final accounting, a failed process leaves its last
// words, and the busy/wait accounting follows nested and concurrent activities.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { startTestNats } from "../helpers/nats.js";
import { deleteTopology, ensureTopology } from "../../streams/topology.js";
import { formatIdleRatios, HealthBoard, HeartbeatSchema, healthKey, readIdleRatios, summariseIdle } from "../../streams/health.js";
import { Health } from "../../actors/runtime/heartbeat.js";
import { createLogger, LastLogLine } from "../../actors/runtime/logger.js";

test("the health bucket is created with the run's topology and deleted with it", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const t = await ensureTopology(nc, "hb-topo");
    const jsm = await jetstreamManager(nc);
    assert.equal((await jsm.streams.info(`KV_${t.names.healthBucket}`)).config.name, "KV_rs-hb-topo-health");
    assert.equal(await new HealthBoard(t.wire.health).exists(), true);
    await deleteTopology(nc, "hb-topo");
    await assert.rejects(jsm.streams.info(`KV_${t.names.healthBucket}`));
    assert.equal(await new HealthBoard(t.wire.health).exists(), false);
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});

test("heartbeats are schema-checked JSON per instance; a clean exit leaves only the final accounting, a failure its last words", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const t = await ensureTopology(nc, "hb-board");
    const board = new HealthBoard(t.wire.health);
    const last = new LastLogLine();
    const log = createLogger({ actor: "inference" }, "warn", last);
    const a = new Health({ actor: "inference", instance: "inference-0", board, lastLog: () => last.line, intervalMs: 50 });
    const b = new Health({ actor: "learner", instance: "host.example-42", board, lastLog: () => null, intervalMs: 50 });
    a.start();
    b.start();
    const task = a.working("task run:0:12");
    a.inFlight(1);
    log.info("not a problem");
    log.warn({ err: new Error("deadline passed") }, "could not fetch weights");
    await b.wait("samples", () => new Promise((r) => setTimeout(r, 150)), { detail: "for step 3" });
    // Each instance writes its first heartbeat on its own timer: on a loaded machine one can come late.
    let entries = await board.read();
    for (const until = Date.now() + 5_000; entries.length < 2 && Date.now() < until; entries = await board.read()) await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(
      entries.map((e) => e.key),
      ["inference.inference-0", "learner.host.example-42"],
    );
    const hb = entries[0]!.heartbeat!;
    assert.equal(hb.state, "working");
    assert.equal(hb.what, "task run:0:12");
    assert.equal(hb.inFlight, 1);
    assert.equal(hb.pid, process.pid);
    assert.equal(hb.lastLog?.level, "warn");
    assert.equal(hb.lastLog?.msg, "could not fetch weights: deadline passed");
    assert.ok(entries[0]!.written.getTime() <= Date.now() + 1000);
    // The value is plain JSON (what `nats kv get` prints), and it matches the schema.
    const raw = JSON.parse(new TextDecoder().decode((await t.health.get(healthKey("inference", "inference-0")))!.value));
    assert.equal(HeartbeatSchema.safeParse(raw).success, true);
    assert.ok(entries[1]!.heartbeat!.waitMs.samples! >= 100, "the learner's wait was counted");

    task.end();
    await a.exit();
    // A process that failed stops beating, and its key stays with its last heartbeat.
    await b.stop();
    const after = await board.read();
    assert.deepEqual(
      after.map((e) => [e.key, e.exited]),
      [
        ["exited.inference.inference-0", true],
        ["learner.host.example-42", false],
      ],
    );
    assert.ok(after[0]!.heartbeat!.exitedAt);
    assert.ok(after[0]!.heartbeat!.busyMs > 0);
    // Nothing is written after exit, even when a late signal marks it draining.
    a.draining();
    await new Promise((r) => setTimeout(r, 200));
    assert.equal((await board.read()).length, 2);
    // The idle summary includes exited instances' final accounting.
    const ratios = await readIdleRatios(nc, "hb-board");
    assert.deepEqual(
      ratios.map((r) => r.actor),
      ["inference", "learner"],
    );
    assert.ok(ratios[1]!.idle.samples! > 0.5);
    assert.match(formatIdleRatios(ratios)[1]!, /^learner +busy \d+% {2}waiting: samples \d+%$/);

    // A foreign value is reported with its key, not cast through.
    await t.health.put("reward.reward-0", JSON.stringify({ actor: "reward" }));
    const bad = (await board.read()).find((e) => e.key === "reward.reward-0")!;
    assert.equal(bad.heartbeat, null);
    assert.match(bad.error!, /instance/);
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});

test("busy and wait time follow nested and concurrent activities; idle waits rank below specific ones", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const t = await ensureTopology(nc, "hb-clock");
    let now = 1_000_000;
    const advance = async (ms: number) => {
      now += ms;
      await Promise.resolve();
    };
    const h = new Health({ actor: "reward", instance: "reward-0", board: new HealthBoard(t.wire.health), lastLog: () => null, now: () => now });
    assert.equal(h.snapshot().state, "starting");
    await advance(500); // start-up counts in neither
    // Input wait (idle), then a message handled whose rubric waits on the sandbox inside it.
    const input = h.waiting("rollouts.raw", { idle: true });
    await advance(200);
    assert.deepEqual([h.snapshot().state, h.snapshot().what, h.snapshot().idle], ["waiting", "rollouts.raw", true]);
    input.end();
    await h.work("rollout group raw:r:0:1", async () => {
      await advance(100);
      await h.wait(
        "sandbox",
        async () => {
          const s = h.snapshot();
          assert.deepEqual([s.state, s.what, s.idle], ["waiting", "sandbox python exec", false]);
          h.note("python exec (2 of 4)");
          assert.equal(h.snapshot().what, "sandbox python exec (2 of 4)");
          await advance(300);
        },
        { detail: "python exec" },
      );
      await advance(50);
    });
    // A wait outside any work (inference fetching weights) does not stop concurrent work being busy.
    const task = h.working("task r:0:2");
    const weights = h.waiting("weights", { detail: "v7" });
    await advance(100);
    assert.equal(h.snapshot().state, "working");
    task.end();
    const idle = h.waiting("tasks", { idle: true });
    await advance(40);
    const s = h.snapshot();
    assert.deepEqual([s.state, s.what], ["waiting", "weights v7"], "a specific wait is shown before an idle one");
    weights.end();
    idle.end();
    const fin = h.snapshot();
    assert.equal(fin.busyMs, 100 + 50 + 100);
    assert.deepEqual(fin.waitMs, { "rollouts.raw": 200, sandbox: 300, weights: 40 });
    assert.equal(fin.idleRatio.sandbox, 300 / 790);
    assert.deepEqual(summariseIdle([fin])[0]!.idle, fin.idleRatio);
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});
