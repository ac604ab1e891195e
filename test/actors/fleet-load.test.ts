// Per-server in-flight caps from the servers' own queue and KV gauges: the Prometheus text of vLLM, SGLang and
// rollstream serve is read as each exports it (labels, several engines summed, vLLM's older KV gauge); a server
// that queues gets the cap of what it runs at once, and one with room that the fleet waits for gets more. The
// control: with adaptiveCap off, the cap stays put whatever the server says.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Fleet } from "../../actors/inference/fleet/fleet.js";
import { HfExporter } from "../../actors/inference/fleet/hf-export.js";
import { SglangServer } from "../../actors/inference/fleet/sglang.js";
import { LOAD_GAUGES, loadOf, metricSums, nextCap } from "../../actors/inference/fleet/server-load.js";
import { FleetSchema } from "../../actors/runtime/config.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import type { Task } from "../../streams/index.js";
import { TestEngineServer } from "../helpers/test-engine-server.js";

const SGLANG = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0"} 3.0
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="1"} 2.0
sglang:num_queue_reqs{model_name="m",tp_rank="0"} 4.0
sglang:token_usage{model_name="m"} 0.52
`;
const VLLM_OLD = `vllm:num_requests_running{model_name="m"} 7
vllm:num_requests_waiting{model_name="m"} 0
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
`;

test("loads are read from each server's exposition: labels summed, vLLM's older KV gauge, none without gauges", () => {
  assert.equal(metricSums(SGLANG).get("sglang:num_running_reqs"), 5);
  assert.deepEqual(loadOf(SGLANG, LOAD_GAUGES.sglang), { running: 5, waiting: 4, kvUsage: 0.52 });
  assert.deepEqual(loadOf(VLLM_OLD, LOAD_GAUGES.vllm), { running: 7, waiting: 0, kvUsage: 0.25 });
  assert.deepEqual(loadOf("rollstream_serve_num_requests_running 2\nrollstream_serve_num_requests_waiting 1\n", LOAD_GAUGES.rollstream), {
    running: 2,
    waiting: 1,
    kvUsage: null,
  });
  assert.equal(loadOf("process_cpu_seconds_total 3\n", LOAD_GAUGES.vllm), null, "no gauges of ours: no load");
  assert.equal(loadOf(SGLANG, LOAD_GAUGES.vllm), null, "another server's gauges are not ours");
});

test("nextCap: down to what runs while the server queues or its KV is full, up by a quarter while held back with room", () => {
  assert.equal(nextCap(64, { running: 5, waiting: 4, kvUsage: 0.5 }, 64, true), 5);
  assert.equal(nextCap(64, { running: 9, waiting: 0, kvUsage: 0.97 }, 64, true), 9);
  assert.equal(nextCap(3, { running: 0, waiting: 2, kvUsage: null }, 64, false), 1, "never below one");
  assert.equal(nextCap(8, { running: 8, waiting: 0, kvUsage: 0.3 }, 64, true), 10);
  assert.equal(nextCap(62, { running: 8, waiting: 0, kvUsage: null }, 64, true), 64, "never above the setting");
  assert.equal(nextCap(8, { running: 8, waiting: 0, kvUsage: 0.3 }, 64, false), 8, "not held back: stays");
  assert.equal(nextCap(8, { running: 8, waiting: 0, kvUsage: 0.92 }, 64, true), 8, "little KV room: stays");
});

const task = (id: string): Task => ({
  run: "r",
  taskId: id,
  epoch: 0,
  index: 0,
  step: 0,
  env: "e@1",
  envKey: "e",
  exampleIndex: 0,
  groupSize: 8,
  sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 },
  seed: 5,
});

async function until(what: string, cond: () => boolean): Promise<void> {
  for (const t0 = Date.now(); !cond(); await new Promise((r) => setTimeout(r, 20))) assert.ok(Date.now() - t0 < 20_000, `never: ${what}`);
}

async function withFleet(adaptiveCap: boolean, body: (fleet: Fleet, server: TestEngineServer) => Promise<void>): Promise<void> {
  const server = await TestEngineServer.sglang();
  const dir = mkdtempSync(join(tmpdir(), "rs-fleet-load-"));
  const ctl = new AbortController();
  const fleet = new Fleet({
    servers: [new SglangServer(server.url)],
    tokenizer: new ByteTokenizer(),
    contextTokens: 64,
    run: "r",
    settings: FleetSchema.parse({ maxInFlightPerServer: 16, adaptiveCap, loadCheckMs: 50, healthCheckMs: 50 }),
    exporter: new HfExporter(join(dir, "hf"), "{}", undefined, 2),
    log: { info() {}, warn() {} },
    signal: ctl.signal,
  });
  try {
    await fleet.start(0, new Uint8Array([1, 2, 3]));
    await body(fleet, server);
  } finally {
    ctl.abort();
    await server.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

test("a fleet's cap for a server follows its /metrics: down while it queues, up while the fleet waits and it has room", async () => {
  await withFleet(true, async (fleet, server) => {
    server.engine.metrics = "sglang:num_running_reqs 3\nsglang:num_queue_reqs 6\nsglang:token_usage 0.4\n";
    await until("the cap falls to what the server runs", () => fleet.describe()[0]!.cap === 3);
    // Room again, and 8 rollouts waiting on a slow server: the cap grows back.
    server.engine.metrics = "sglang:num_running_reqs 3\nsglang:num_queue_reqs 0\nsglang:token_usage 0.2\n";
    server.engine.stepDelayMs = 40;
    const prompt = new ByteTokenizer().encode("hi");
    const runs = fleet.rolloutClients(task("t")).map((c) => c.generate(prompt, task("t").sampling));
    await until("the cap grows while the fleet is held back", () => fleet.describe()[0]!.cap > 3);
    await Promise.all(runs);
  });
});

test("control: with adaptiveCap off the cap stays at maxInFlightPerServer whatever the server reports", async () => {
  await withFleet(false, async (fleet, server) => {
    server.engine.metrics = "sglang:num_running_reqs 3\nsglang:num_queue_reqs 6\n";
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(fleet.describe()[0]!.cap, 16);
  });
});
