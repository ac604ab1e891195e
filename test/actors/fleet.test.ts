// The fleet over SGLang and vLLM test servers: sticky routing by rollout, per-token version spans across an
// update in the middle of a generation and of a rollout, a server killed mid-run (its requests finish on
// another, nothing lost, it rejoins once healthy and updated), a failed update (out of rotation), the cap
// on requests in flight per server, and the HF folders the servers load.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Fleet } from "../../actors/inference/fleet/fleet.js";
import { HfExporter } from "../../actors/inference/fleet/hf-export.js";
import { GenerationBuilder, firstStop } from "../../actors/inference/fleet/generation.js";
import { SglangServer } from "../../actors/inference/fleet/sglang.js";
import { VllmServer } from "../../actors/inference/fleet/vllm.js";
import type { EngineServer } from "../../actors/inference/fleet/engine-server.js";
import { FleetSchema, parseRunConfig } from "../../actors/runtime/config.js";
import type { Generation, ModelClient } from "../../environments/api/model.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import type { Task } from "../../streams/index.js";
import { TestEngineServer } from "../helpers/test-engine-server.js";
import { tinyConfig } from "../helpers/run-fixture.js";

const tok = new ByteTokenizer();
const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 6 };
const silent = { info() {}, warn() {} };
const WEIGHTS = new Uint8Array([1, 2, 3]);

interface Rig {
  fleet: Fleet;
  dir: string;
  close(): Promise<void>;
}

async function rig(servers: TestEngineServer[], clients: EngineServer[], settings: Record<string, unknown> = {}): Promise<Rig> {
  const dir = mkdtempSync(join(tmpdir(), "rs-fleet-"));
  const ctl = new AbortController();
  const fleet = new Fleet({
    servers: clients,
    tokenizer: tok,
    contextTokens: 64,
    run: "r",
    settings: FleetSchema.parse({ healthCheckMs: 50, updateRetries: 1, requestDeadlineMs: 10_000, updateDeadlineMs: 5_000, ...settings }),
    exporter: new HfExporter(join(dir, "hf"), "{}", undefined, 2),
    log: silent,
    signal: ctl.signal,
  });
  await fleet.start(0, WEIGHTS);
  return {
    fleet,
    dir,
    async close() {
      ctl.abort();
      for (const s of servers) await s.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function task(id: string, groupSize: number): Task {
  return { run: "r", taskId: id, epoch: 0, index: 0, step: 0, env: "e@1", envKey: "e", exampleIndex: 0, groupSize, sampling, seed: 5 };
}

/** A three-turn rollout: each turn continues the transcript so far. */
async function rollout(model: ModelClient, turns = 3): Promise<Generation[]> {
  let ids = tok.encode("hi");
  const out: Generation[] = [];
  for (let t = 0; t < turns; t++) {
    const g = await model.generate(ids, sampling);
    out.push(g);
    ids = [...ids, ...g.tokenIds, ...tok.encode("ok")];
  }
  return out;
}

/** Which server each request id went to. */
function serverOfRequests(servers: TestEngineServer[]): Map<string, number> {
  const m = new Map<string, number>();
  servers.forEach((s, i) => {
    for (const r of s.engine.received) if (r.route === "/generate") m.set((r.body as { rid: string }).rid, i);
  });
  return m;
}

test("all turns of one rollout go to one server; rollouts spread over the fleet; caches are salted by version", async () => {
  const servers = [await TestEngineServer.sglang(), await TestEngineServer.sglang()];
  const r = await rig(
    servers,
    servers.map((s) => new SglangServer(s.url)),
  );
  try {
    const clients = r.fleet.rolloutClients(task("t1", 6));
    const gens = await Promise.all(clients.map((c) => rollout(c)));
    assert.ok(gens.flat().every((g) => g.tokenIds.length === 6 && g.stopReason === "length" && g.policyVersion === 0));
    const where = serverOfRequests(servers);
    const byRollout = new Map<string, Set<number>>();
    for (const [rid, server] of where) {
      const key = rid.split(".").slice(0, 3).join("."); // r.t1.<i>
      byRollout.set(key, (byRollout.get(key) ?? new Set()).add(server));
    }
    assert.equal(byRollout.size, 6);
    for (const [key, set] of byRollout) assert.equal(set.size, 1, `${key} went to ${[...set]}`);
    assert.deepEqual(new Set([...byRollout.values()].map((s) => [...s][0])), new Set([0, 1]), "both servers used");
    assert.ok(
      servers.every((s) => s.engine.received.filter((x) => x.route === "/generate").every((x) => (x.body as { extra_key: string }).extra_key === "r:v0")),
    );
  } finally {
    await r.close();
  }
});

for (const reportVersions of [true, false]) {
  test(`an update in the middle of a generation: the aborted part is resubmitted and the spans say which version drew which token (server reports versions: ${reportVersions})`, async () => {
    const s = await TestEngineServer.sglang({ reportVersions });
    s.engine.stepDelayMs = 30;
    const r = await rig([s], [new SglangServer(s.url)]);
    try {
      const [client] = r.fleet.rolloutClients(task("t2", 1));
      const pending = client!.generate(tok.encode("hello"), { ...sampling, maxTokens: 10 });
      while (s.engine.busy === 0 || s.engine.received.length < 2) await new Promise((res) => setTimeout(res, 5));
      await new Promise((res) => setTimeout(res, 100)); // a few tokens in
      await r.fleet.swapWeights(1, WEIGHTS, false);
      const g = await pending;
      assert.equal(g.tokenIds.length, 10);
      assert.equal(g.stopReason, "length");
      assert.equal(g.policyVersion, 0);
      const spans = g.versionSpans!;
      assert.equal(spans.length, 2, JSON.stringify(spans));
      assert.deepEqual(
        spans.map((x) => x.version),
        [0, 1],
      );
      assert.ok(spans[0]!.end > 0 && spans[0]!.end < 10 && spans[1]!.start === spans[0]!.end && spans[1]!.end === 10);
      // The resubmitted request continued the same prefix: prompt + the tokens of the aborted part.
      const gens = s.engine.received.filter((x) => x.route === "/generate").map((x) => x.body as { input_ids: number[]; extra_key: string });
      const last = gens.at(-1)!;
      assert.deepEqual(last.input_ids, [...tok.encode("hello"), ...g.tokenIds.slice(0, spans[0]!.end)]);
      assert.equal(last.extra_key, "r:v1");
      assert.equal(r.fleet.version, 1);
    } finally {
      await r.close();
    }
  });
}

test("vLLM pause keep: requests continue under the new weights and the server's spans are used", async () => {
  const s = await TestEngineServer.vllm();
  s.engine.stepDelayMs = 30;
  const r = await rig([s], [new VllmServer(s.url, { pauseMode: "keep", weightsRoute: "/update_weights" })], { vllmPauseMode: "keep" });
  try {
    const [client] = r.fleet.rolloutClients(task("t3", 1));
    const pending = client!.generate(tok.encode("hello"), { ...sampling, maxTokens: 10 });
    while (s.engine.busy === 0) await new Promise((res) => setTimeout(res, 5));
    await new Promise((res) => setTimeout(res, 100));
    await r.fleet.swapWeights(1, WEIGHTS, false);
    const g = await pending;
    assert.equal(g.tokenIds.length, 10);
    assert.deepEqual(
      g.versionSpans?.map((x) => x.version),
      [0, 1],
    );
    assert.equal(s.engine.received.filter((x) => x.route === "/inference/v1/generate").length, 1, "one request, never aborted");
  } finally {
    await r.close();
  }
});

test("an update between turns of a rollout: each turn carries the version that sampled it", async () => {
  const servers = [await TestEngineServer.sglang(), await TestEngineServer.sglang()];
  const r = await rig(
    servers,
    servers.map((s) => new SglangServer(s.url)),
  );
  try {
    const [client] = r.fleet.rolloutClients(task("t4", 1));
    const first = await client!.generate(tok.encode("a"), sampling);
    await r.fleet.swapWeights(1, WEIGHTS, false);
    const second = await client!.generate([...tok.encode("a"), ...first.tokenIds], sampling);
    assert.equal(first.policyVersion, 0);
    assert.equal(second.policyVersion, 1);
    // Servers were updated one at a time, each to v1, each from the exported folder.
    for (const s of servers)
      assert.deepEqual(
        s.engine.loads.map((l) => l[0]),
        ["0", "1"],
      );
  } finally {
    await r.close();
  }
});

test("while its server updates, a rollout moves to a server already on the new weights rather than wait", async () => {
  const servers = [await TestEngineServer.sglang(), await TestEngineServer.sglang()];
  const r = await rig(
    servers,
    servers.map((s) => new SglangServer(s.url)),
  );
  try {
    const clients = r.fleet.rolloutClients(task("t8", 2));
    await Promise.all(clients.map((c) => c.generate(tok.encode("a"), sampling)));
    const onSecond = clients.findIndex((_, i) => [...serverOfRequests(servers)].some(([rid, s]) => rid.startsWith(`r.t8.${i}.`) && s === 1));
    assert.ok(onSecond >= 0);
    servers[1]!.engine.loadDelayMs = 1_000; // servers update in order: the first is on v1 while the second loads
    const swap = r.fleet.swapWeights(1, WEIGHTS, false);
    while (r.fleet.describe()[1]!.state !== "updating") await new Promise((res) => setTimeout(res, 5));
    const g = await clients[onSecond]!.generate(tok.encode("ab"), sampling);
    assert.equal(r.fleet.describe()[1]!.state, "updating", "answered before the second server's update ended");
    assert.equal(g.policyVersion, 1);
    await swap;
  } finally {
    await r.close();
  }
});

test("a server killed mid-run: its requests finish on the other, nothing is lost; it rejoins after a health check and an update", async () => {
  const servers = [await TestEngineServer.sglang(), await TestEngineServer.sglang()];
  for (const s of servers) s.engine.stepDelayMs = 20;
  const r = await rig(
    servers,
    servers.map((s) => new SglangServer(s.url)),
  );
  try {
    const clients = r.fleet.rolloutClients(task("t5", 8));
    const pending = Promise.all(clients.map((c) => rollout(c, 2)));
    while (servers[0]!.engine.busy === 0) await new Promise((res) => setTimeout(res, 5));
    await new Promise((res) => setTimeout(res, 50));
    await servers[0]!.kill();
    const gens = await pending;
    assert.equal(gens.length, 8);
    assert.ok(
      gens.flat().every((g) => g.tokenIds.length === 6 && g.logprobs.length === 6),
      "every generation complete",
    );
    // Rollouts that were on the killed server moved to the other (their later requests went there).
    const where = [...serverOfRequests(servers)];
    const moved = clients.filter((_, i) => new Set(where.filter(([rid]) => rid.startsWith(`r.t5.${i}.`)).map(([, s]) => s)).size === 2);
    assert.ok(moved.length > 0, "some rollouts moved from the killed server");
    assert.equal(r.fleet.describe()[0]!.state, "out");
    await r.fleet.swapWeights(1, WEIGHTS, false); // the dead server misses v1
    assert.deepEqual(
      servers[0]!.engine.loads.map((l) => l[0]),
      ["0"],
    );
    await servers[0]!.restart();
    const deadline = Date.now() + 5_000;
    while (r.fleet.describe()[0]!.state !== "in" && Date.now() < deadline) await new Promise((res) => setTimeout(res, 20));
    assert.deepEqual(r.fleet.describe()[0], { url: servers[0]!.url, state: "in", version: 1, inFlight: 0, cap: 64 });
    assert.deepEqual(
      servers[0]!.engine.loads.map((l) => l[0]),
      ["0", "1"],
      "rejoined with the current version",
    );
  } finally {
    await r.close();
  }
});

test("a server that fails its update leaves rotation rather than serve stale weights", async () => {
  const servers = [await TestEngineServer.sglang(), await TestEngineServer.sglang()];
  const r = await rig(
    servers,
    servers.map((s) => new SglangServer(s.url)),
  );
  try {
    servers[1]!.engine.failUpdates = true;
    await r.fleet.swapWeights(1, WEIGHTS, false);
    assert.deepEqual(
      r.fleet.describe().map((d) => [d.state, d.version]),
      [
        ["in", 1],
        ["out", 0],
      ],
    );
    assert.equal(servers[1]!.engine.received.filter((x) => x.route === "/update_weights_from_disk").length, 3, "first load, then 1 + 1 retry");
    const before = servers[1]!.engine.received.length;
    const gens = await Promise.all(r.fleet.rolloutClients(task("t6", 4)).map((c) => c.generate(tok.encode("x"), sampling)));
    assert.ok(gens.every((g) => g.policyVersion === 1));
    assert.equal(servers[1]!.engine.received.slice(before).filter((x) => x.route === "/generate").length, 0, "nothing sent to the stale server");
    servers[1]!.engine.failUpdates = false;
    const deadline = Date.now() + 5_000;
    while (r.fleet.describe()[1]!.state !== "in" && Date.now() < deadline) await new Promise((res) => setTimeout(res, 20));
    assert.deepEqual(r.fleet.describe()[1]!.version, 1);
  } finally {
    await r.close();
  }
});

test("no server holds more requests than maxInFlightPerServer", async () => {
  const s = await TestEngineServer.vllm();
  s.engine.stepDelayMs = 5;
  const r = await rig([s], [new VllmServer(s.url, { pauseMode: "abort", weightsRoute: "/update_weights" })], { maxInFlightPerServer: 2 });
  try {
    let most = 0;
    const watch = setInterval(() => (most = Math.max(most, s.engine.busy)), 1);
    await Promise.all(r.fleet.rolloutClients(task("t7", 7)).map((c) => c.generate(tok.encode("x"), sampling)));
    clearInterval(watch);
    assert.ok(most <= 2 && most >= 1, `at most 2 in flight, saw ${most}`);
  } finally {
    await r.close();
  }
});

test("a generation stops after a stop token or stop string, and never asks past the context window", () => {
  const end = tok.stopTokenIds()[0]!;
  assert.deepEqual(firstStop([97, 98, end, 99], [end], []), { end: 3, reason: "eos" });
  assert.deepEqual(firstStop([97, 98, 99, 100], [end], [[98, 99]]), { end: 3, reason: "stop" });
  const b = new GenerationBuilder();
  b.append({ tokenIds: [97, 98], logprobs: [-1, -2], finish: "abort" }, 3);
  b.append({ tokenIds: [99, 100, 101], logprobs: [-3, -4, -5], finish: "length", versionSpans: [{ version: 4, start: 0, end: 3 }] }, 9);
  const g = b.finish({ maxTokens: 8, budget: 5, serverStopped: false, stopTokenIds: [end], stopSequences: [[99, 100]], tokenizer: tok, versionIfEmpty: 0 });
  assert.deepEqual(g.tokenIds, [97, 98, 99, 100]);
  assert.deepEqual(g.logprobs, [-1, -2, -3, -4]);
  assert.equal(g.stopReason, "stop");
  assert.equal(g.text, "abcd");
  assert.deepEqual(g.versionSpans, [
    { version: 3, start: 0, end: 2 },
    { version: 4, start: 2, end: 4 },
  ]);
  const full = new GenerationBuilder();
  full.append({ tokenIds: [97, 97, 97], logprobs: [0, 0, 0], finish: "length" }, 2);
  const c = full.finish({ maxTokens: 8, budget: 3, serverStopped: false, stopTokenIds: [end], stopSequences: [], tokenizer: tok, versionIfEmpty: 0 });
  assert.equal(c.stopReason, "context");
  assert.equal(c.versionSpans, undefined);
  assert.equal(c.policyVersion, 2);
});

test("weights export: an HF folder per version with config.json and model.safetensors (and the tokenizer's files), the newest kept", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "rs-export-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const config = parseRunConfig({ ...tinyConfig("x", dir), weights: { keepVersions: 2 } });
  const ex = HfExporter.forRun(config, join(dir, "x"));
  assert.equal(ex.dir, join(dir, "x", "hf-weights"));
  for (const v of [0, 1, 2]) ex.write(v, new Uint8Array([v]));
  const cfg = JSON.parse(readFileSync(join(ex.folderOf(2), "config.json"), "utf8"));
  assert.equal(cfg.model_type, "llama");
  assert.equal(cfg.hidden_size, 32);
  assert.deepEqual([...readFileSync(join(ex.folderOf(2), "model.safetensors"))], [2]);
  assert.equal(ex.write(2, new Uint8Array([9])), ex.folderOf(2), "a complete folder is not rewritten");
  ex.prune(0);
  assert.deepEqual(
    [0, 1, 2].map((v) => existsSync(ex.folderOf(v))),
    [true, true, true],
    "the current version is kept whatever its age",
  );
  ex.prune(2);
  assert.deepEqual(
    [0, 1, 2].map((v) => existsSync(ex.folderOf(v))),
    [false, true, true],
  );
});

test("config: a fleet backend needs server URLs", () => {
  const base = tinyConfig("x", "/tmp");
  assert.throws(() => parseRunConfig({ ...base, actors: { inference: { backend: "sglang" } } }), /needs at least one server URL/);
  const c = parseRunConfig({ ...base, actors: { inference: { backend: "vllm", servers: ["http://a:8000"], fleet: { vllmPauseMode: "keep" } } } });
  assert.equal(c.actors.inference.fleet.vllmPauseMode, "keep");
  assert.equal(c.actors.inference.fleet.vllmWeightsRoute, "/update_weights");
  assert.equal(parseRunConfig(base).actors.inference.backend, "local");
});
