// The heartbeat as an actor process wires it (lifecycle.buildContext): its warn/error log lines reach the
// heartbeat, its idle ratios reach Prometheus, and the orchestrator's gauge ages every live instance's
// heartbeat from the bucket, dropping instances that exited.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestNats } from "../helpers/nats.js";
import { tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { parseRunConfig } from "../../actors/runtime/config.js";
import { buildContext } from "../../actors/runtime/lifecycle.js";
import { exportHeartbeatAges } from "../../actors/runtime/heartbeat-ages.js";
import { Health } from "../../actors/runtime/heartbeat.js";
import { HealthBoard, openWire } from "../../streams/index.js";

test("heartbeats carry the last warn line and feed idle_ratio; the orchestrator ages every live instance's heartbeat", async () => {
  const srv = await startTestNats();
  const dir = mkdtempSync(join(tmpdir(), "rs-hb-metrics-"));
  const abort = new AbortController();
  const config = parseRunConfig(tinyConfig("hbm", dir));
  const { ctx } = await buildContext("orchestrator", config, { natsUrl: srv.url, instance: "orchestrator-0", signal: abort.signal });
  try {
    const board = new HealthBoard(openWire(ctx.nc, "hbm").health);
    const learner = new Health({ actor: "learner", instance: "learner-0", board, lastLog: () => null, intervalMs: 100 });
    learner.start();
    ctx.health.start();
    await ctx.health.wait("learner", () => new Promise((r) => setTimeout(r, 120)), { detail: "step 1", idle: true });
    ctx.log.warn({ err: "learner.step missing" }, "invalid learner.step ignored");
    exportHeartbeatAges(ctx, 100);
    const metrics = () => ctx.metrics.registry.metrics();
    await waitUntil(
      "both instances aged, and idle_ratio exported",
      async () => {
        const m = await metrics();
        return (
          /rollstream_actor_heartbeat_age_seconds\{actor="learner",instance="learner-0",run="hbm"\} [\d.e-]+/.test(m) &&
          /rollstream_idle_ratio\{reason="learner"/.test(m)
        );
      },
      10_000,
    );
    assert.match(await metrics(), /rollstream_actor_heartbeat_age_seconds\{actor="orchestrator",instance="orchestrator-0",run="hbm"\}/);
    await waitUntil(
      "the warn line in the orchestrator's heartbeat",
      async () => (await ctx.health.peers()).some((e) => e.heartbeat?.lastLog?.msg === "invalid learner.step ignored: learner.step missing"),
      5_000,
    );
    // An instance that exits leaves the gauge (it would otherwise age forever).
    await learner.exit();
    await waitUntil("the exited learner gone from the gauge", async () => !(await metrics()).includes('instance="learner-0"'), 5_000);
  } finally {
    abort.abort();
    await ctx.health.stop(false);
    await ctx.nc.close();
    await srv.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});
