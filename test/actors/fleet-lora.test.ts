// LoRA adapter shipping (model.lora.ship adapter) against the vLLM and SGLang test servers, whose LoRA routes are
// written from the upstream sources (see their headers): the clients' load / unload / per-request adapter fields,
// and the fleet bringing each server to the base once and to each version's adapter, naming it on every request,
// unloading the ones beyond what the run keeps, and taking a server that fails its adapter load out of rotation.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Fleet } from "../../actors/inference/fleet/fleet.js";
import { HfExporter } from "../../actors/inference/fleet/hf-export.js";
import { SglangServer } from "../../actors/inference/fleet/sglang.js";
import { VllmServer } from "../../actors/inference/fleet/vllm.js";
import { RequestRejected, ServerDown } from "../../actors/inference/fleet/http.js";
import { type EngineServer, type SegmentRequest, versionOfLabel } from "../../actors/inference/fleet/engine-server.js";
import { FleetSchema } from "../../actors/runtime/config.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import type { LoraAdapterFiles, Task } from "../../streams/index.js";
import { TestEngineServer } from "../helpers/test-engine-server.js";

const tok = new ByteTokenizer();
const opts = { deadlineMs: 5_000 };
const req: SegmentRequest = {
  requestId: "r.t.0.1.1",
  tokenIds: [1, 104, 105],
  maxTokens: 4,
  temperature: 1,
  topP: 1,
  topK: 0,
  seed: 3,
  stopTokenIds: [257],
  cacheKey: "r:v1",
};

function peftFolder(root: string, name: string): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "adapter_config.json"), "{}");
  writeFileSync(join(dir, "adapter_model.safetensors"), "x");
  return dir;
}

test("vLLM client: /v1/load_lora_adapter {lora_name, lora_path}, model names the adapter, /v1/unload_lora_adapter {lora_name}", async () => {
  const s = await TestEngineServer.vllm();
  const root = mkdtempSync(join(tmpdir(), "rs-lora-"));
  try {
    const client = new VllmServer(s.url, { pauseMode: "abort", weightsRoute: "/update_weights" });
    // Positive control: the server refuses a request for an adapter it does not have.
    await assert.rejects(client.generate({ ...req, adapter: "r-v1" }, opts), (e: unknown) => e instanceof RequestRejected && e.status === 404);
    const dir = peftFolder(root, "r-v1");
    await client.loadAdapter("r-v1", dir, opts);
    assert.deepEqual(s.engine.received.find((r) => r.route === "/v1/load_lora_adapter")!.body, { lora_name: "r-v1", lora_path: dir });
    // A retry of a load whose answer was lost: the server says 400 "already been loaded", which counts as loaded.
    await client.loadAdapter("r-v1", dir, opts);
    assert.equal(s.engine.received.filter((r) => r.route === "/v1/load_lora_adapter").length, 2);
    const seg = await client.generate({ ...req, adapter: "r-v1" }, opts);
    assert.equal(seg.tokenIds.length, 4);
    const sent = s.engine.received.filter((r) => r.route === "/inference/v1/generate").at(-1)!.body as Record<string, unknown>;
    assert.equal(sent.model, "r-v1");
    assert.deepEqual(s.engine.adapterOfRequests, ["r-v1"]);
    // A request without an adapter sends no model field.
    await client.generate(req, opts);
    assert.equal("model" in (s.engine.received.filter((r) => r.route === "/inference/v1/generate").at(-1)!.body as object), false);
    await client.unloadAdapter("r-v1", opts);
    assert.deepEqual(s.engine.received.find((r) => r.route === "/v1/unload_lora_adapter")!.body, { lora_name: "r-v1" });
    assert.equal(s.engine.adapters.size, 0);
    // Unloading again (a restarted server has none): the server's 404 is no failure.
    await client.unloadAdapter("r-v1", opts);
    // A folder that is not an adapter: the server fails the load (500), the server's failure.
    await assert.rejects(client.loadAdapter("r-v2", join(root, "missing"), opts), (e: unknown) => e instanceof ServerDown);
  } finally {
    await s.kill();
    rmSync(root, { recursive: true, force: true });
  }
});

test("SGLang client: /load_lora_adapter {lora_name, lora_path}, lora_path names the adapter, /unload_lora_adapter {lora_name}", async () => {
  const s = await TestEngineServer.sglang();
  const root = mkdtempSync(join(tmpdir(), "rs-lora-"));
  try {
    const client = new SglangServer(s.url);
    await assert.rejects(client.generate({ ...req, adapter: "r-v1" }, opts), (e: unknown) => e instanceof RequestRejected && e.status === 400);
    const dir = peftFolder(root, "r-v1");
    await client.loadAdapter("r-v1", dir, opts);
    assert.deepEqual(s.engine.received.find((r) => r.route === "/load_lora_adapter")!.body, { lora_name: "r-v1", lora_path: dir });
    await client.loadAdapter("r-v1", dir, opts); // 400 {success: false, "already exists"}: loaded
    const seg = await client.generate({ ...req, adapter: "r-v1" }, opts);
    assert.equal(seg.tokenIds.length, 4);
    assert.equal((s.engine.received.filter((r) => r.route === "/generate").at(-1)!.body as Record<string, unknown>).lora_path, "r-v1");
    await client.unloadAdapter("r-v1", opts);
    assert.deepEqual(s.engine.received.find((r) => r.route === "/unload_lora_adapter")!.body, { lora_name: "r-v1" });
    assert.equal(s.engine.adapters.size, 0);
    await client.unloadAdapter("r-v1", opts); // {success: false}: not loaded, no failure
    await assert.rejects(
      client.loadAdapter("r-v2", join(root, "missing"), opts),
      (e: unknown) => e instanceof ServerDown && /load_lora_adapter r-v2 failed/.test(e.message),
    );
  } finally {
    await s.kill();
    rmSync(root, { recursive: true, force: true });
  }
});

test("labels: a full-weight version, an adapter's name <run>-v<n>; a LoRA base's label is none of ours", () => {
  assert.equal(versionOfLabel("7"), 7);
  assert.equal(versionOfLabel("demo-lora-v12"), 12);
  assert.equal(versionOfLabel("lora-base-0123456789ab"), null);
  assert.equal(versionOfLabel("default"), null);
});

const BASE_SHA = "a".repeat(64);

function adapterOf(version: number): LoraAdapterFiles {
  return { config: `{"r": 8, "v": ${version}}`, weights: new Uint8Array([version]), baseSha256: BASE_SHA };
}

async function fleetOver(clients: EngineServer[], dir: string, keep: number, extra: Record<string, unknown> = {}) {
  const ctl = new AbortController();
  const baseFetches: string[] = [];
  const fleet = new Fleet({
    servers: clients,
    tokenizer: tok,
    contextTokens: 64,
    run: "r",
    settings: FleetSchema.parse({ healthCheckMs: 50, updateRetries: 1, requestDeadlineMs: 10_000, updateDeadlineMs: 5_000, adaptiveCap: false, ...extra }),
    exporter: new HfExporter(join(dir, "hf"), "{}", undefined, keep),
    adapters: {
      adapter: async (v) => (v >= 2 ? adapterOf(v) : null),
      base: async (sha) => {
        baseFetches.push(sha);
        return new Uint8Array([9, 9]);
      },
      keep,
    },
    log: { info() {}, warn() {} },
    signal: ctl.signal,
  });
  return { fleet, baseFetches, stop: () => ctl.abort() };
}

function task(id: string): Task {
  const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 4 };
  return { run: "r", taskId: id, epoch: 0, index: 0, step: 0, env: "e@1", envKey: "e", exampleIndex: 0, groupSize: 1, sampling, seed: 5 };
}

test("fleet, adapter shipping: the base once per server, each version's adapter by name on every request, the oldest unloaded", async () => {
  const servers = [await TestEngineServer.vllm(), await TestEngineServer.sglang()];
  const clients = [new VllmServer(servers[0]!.url, { pauseMode: "abort", weightsRoute: "/update_weights" }), new SglangServer(servers[1]!.url)];
  const dir = mkdtempSync(join(tmpdir(), "rs-fleet-lora-"));
  const { fleet, baseFetches, stop } = await fleetOver(clients, dir, 2);
  try {
    // v1 has no adapters (an SFT version): shipped whole, as without adapter shipping.
    await fleet.start(1, new Uint8Array([1]));
    assert.ok(existsSync(join(dir, "hf", "v1", "model.safetensors")));
    for (const s of servers) assert.equal(s.engine.adapters.size, 0);
    for (let v = 2; v <= 5; v++) {
      await fleet.swapWeights(v, new Uint8Array([v]), false);
      const [g] = await Promise.all(
        fleet.rolloutClients(task(`t${v}`)).map((c) => c.generate(tok.encode("hi"), { temperature: 1, topP: 1, topK: 0, maxTokens: 4 })),
      );
      assert.equal(g!.policyVersion, v, "the tokens are the version whose adapter the request named");
      assert.equal(g!.versionSpans, undefined);
    }
    // The base was exported and fetched once, loaded once per server (vLLM through its reload route, SGLang
    // update_weights_from_disk) with a label that is none of our versions, after v1's full weights.
    assert.deepEqual(baseFetches, [BASE_SHA]);
    const baseDir = join(dir, "hf", `lora-base-${BASE_SHA.slice(0, 12)}`);
    assert.deepEqual(
      servers[0]!.engine.loads.map((l) => l[1]),
      [join(dir, "hf", "v1"), baseDir],
    );
    assert.deepEqual(servers[1]!.engine.loads, [
      ["1", join(dir, "hf", "v1")],
      [`lora-base-${BASE_SHA.slice(0, 12)}`, baseDir],
    ]);
    for (const s of servers) {
      assert.deepEqual(
        s.engine.adapterLoads.map((l) => l[0]),
        ["r-v2", "r-v3", "r-v4", "r-v5"],
      );
      assert.deepEqual([...s.engine.adapters.keys()], ["r-v4", "r-v5"], "the newest weights.keepVersions stay loaded");
      assert.ok(!s.engine.adapterOfRequests.includes(null), "no request went to the bare base");
    }
    // Every request after v2 named the adapter its server had; the folders are PEFT's.
    const named = servers.flatMap((s) => s.engine.adapterOfRequests);
    assert.deepEqual(new Set(named), new Set(["r-v2", "r-v3", "r-v4", "r-v5"]));
    assert.equal(readFileSync(join(dir, "hf", "r-v5", "adapter_config.json"), "utf8"), adapterOf(5).config);
    assert.deepEqual([...readFileSync(join(dir, "hf", "r-v5", "adapter_model.safetensors"))], [5]);
    assert.ok(!existsSync(join(dir, "hf", "r-v2")), "adapter folders beyond weights.keepVersions are pruned");
    assert.ok(!existsSync(join(dir, "hf", "v5")), "a version shipped as adapters is not exported whole");

    // A server that fails its adapter load (every retry) leaves rotation; the other serves on.
    servers[0]!.engine.failUpdates = true;
    await fleet.swapWeights(6, new Uint8Array([6]), false);
    assert.deepEqual(
      fleet.describe().map((d) => [d.state, d.version]),
      [
        ["out", 5],
        ["in", 6],
      ],
    );
    // Once it loads again it rejoins: the base again (it may have restarted) and the current adapter.
    servers[0]!.engine.failUpdates = false;
    const deadline = Date.now() + 5_000;
    while (fleet.describe()[0]!.state !== "in" && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(fleet.describe()[0], { ...fleet.describe()[0]!, state: "in", version: 6 });
    assert.equal(servers[0]!.engine.loads.at(-1)![1], baseDir);
    assert.deepEqual(servers[0]!.engine.adapterLoads.at(-1), ["r-v6", join(dir, "hf", "r-v6")]);
  } finally {
    stop();
    for (const s of servers) await s.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("fleet.loraBase served: servers started on the base get adapters only, never a full-weight load", async () => {
  const s = await TestEngineServer.vllm();
  const dir = mkdtempSync(join(tmpdir(), "rs-fleet-lora-"));
  const { fleet, stop } = await fleetOver([new VllmServer(s.url, { pauseMode: "abort", weightsRoute: "/update_weights" })], dir, 2, { loraBase: "served" });
  try {
    await fleet.start(2, new Uint8Array([2]));
    await fleet.swapWeights(3, new Uint8Array([3]), false);
    assert.deepEqual(s.engine.loads, [], "no full-weight load (upstream vLLM has no route for one)");
    assert.ok(!s.engine.received.some((r) => r.route === "/update_weights" || r.route.startsWith("/pause")));
    assert.deepEqual(
      s.engine.adapterLoads.map((l) => l[0]),
      ["r-v2", "r-v3"],
    );
    const [g] = await Promise.all(fleet.rolloutClients(task("t")).map((c) => c.generate(tok.encode("hi"), { temperature: 1, topP: 1, topK: 0, maxTokens: 3 })));
    assert.equal(g!.policyVersion, 3);
    assert.deepEqual(s.engine.adapterOfRequests, ["r-v3"]);
  } finally {
    stop();
    await s.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});
