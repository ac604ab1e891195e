// A LoRA RL run (examples/demo-lora.yaml's adapters: rank 8, alpha 16, every projection; on the test's tiny model,
// a few steps, an environment whose rewards spread within each group) with model.lora.ship adapter, rolled out through a real `rollstream serve` child process: the fleet
// loads the frozen base once, then each version's PEFT folder under <run>-v<n> through vLLM's
// /v1/load_lora_adapter, every request names it, and every row's per-token versions are adapters the server's
// update log says it loaded (the labels its spans carry are the adapters' names).
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { cliMain, startRun, storedMessages, tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { openWire, RunChannels, StateKeys } from "../../streams/index.js";
import { createPolicyModel } from "../../actors/runtime/model-factory.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { ServeProcess } from "../../deploy/local/serve-process.js";
import { writeSpreadEnv } from "../helpers/spread-env.js";

test("a LoRA run ships adapters to rollstream serve: base once, one adapter per version, row versions = the server's update log", async () => {
  const steps = 4;
  const demo = parse(readFileSync(join(process.cwd(), "examples", "demo-lora.yaml"), "utf8"));
  const model = { ...(tinyConfig("x", "x").model as object), lora: { ...demo.model.lora, ship: "adapter" } };
  // Rewards that vary within every group, so the adapters get a gradient from the first step (positive control below).
  const envDir = mkdtempSync(join(tmpdir(), "rs-fleetlora-env-"));
  process.env.ROLLSTREAM_ENV_PATH = writeSpreadEnv(envDir);
  const run = await startRun("fleetlora", {
    model,
    environments: [{ id: "spread@^1" }],
    rl: { steps, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
    actors: {
      inference: { replicas: 1, maxInFlight: 4, threads: 1, backend: "rollstream", servers: ["http://127.0.0.1:1"], fleet: { healthCheckMs: 200 } },
      reward: { replicas: 1, maxInFlight: 4 },
    },
  });
  let server: ServeProcess | null = null;
  try {
    const files = { updateLog: join(run.dir, "updates.jsonl"), stderrLog: join(run.dir, "serve.log") };
    server = await ServeProcess.start({ binPath: cliMain, source: ["-c", run.configPath], extraArgs: ["--threads", "1"], ...files });
    const cfg = parse(readFileSync(run.configPath, "utf8"));
    cfg.actors.inference.servers = [server.url];
    writeFileSync(run.configPath, stringify(cfg));
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 240_000, `${run.dir}/logs`);

    const names = run.topology.names;
    const scored = await storedMessages(run.topology.jsm, names.streams.rollouts, names.subjects.rolloutsScored);
    const versionsSeen = new Set<number>();
    let tokens = 0;
    for (const m of scored) {
      for (const r of decodeRolloutBatch(m.data).rows) {
        const spans = r.versionSpans.length ? r.versionSpans : [{ version: r.policyVersionMin, start: 0, end: r.completionIds.length }];
        for (const s of spans) versionsSeen.add(s.version);
        tokens += r.completionIds.length;
      }
    }
    const log = server.updates();
    assert.equal(log[0]!.version, "init");
    const bases = log.filter((u) => u.version.startsWith("lora-base-"));
    assert.equal(bases.length, 1, `the base is loaded once (${log.map((u) => u.version)})`);
    const adapters = log.filter((u) => /^fleetlora-v\d+$/.test(u.version));
    assert.equal(adapters.length + 2, log.length, `every other load is an adapter (${log.map((u) => u.version)})`);
    for (const u of adapters) {
      assert.ok(u.source.endsWith(u.version), `${u.source} is the adapter folder ${u.version}`);
      assert.ok(existsSync(join(u.source, "adapter_config.json")) || !existsSync(u.source), "a PEFT folder (or one pruned since)");
    }
    const loaded = new Set(adapters.map((u) => Number(u.version.slice("fleetlora-v".length))));
    for (const v of versionsSeen) assert.ok(loaded.has(v), `rows carry v${v}, which the server's update log has not as an adapter (${[...loaded]})`);
    assert.ok(versionsSeen.size >= 2, `rows from more than one adapter version (${[...versionsSeen]})`);
    assert.ok(tokens > 0);

    // The server serves what the learner trained: greedy on adapter v<steps> equals the learner's merged weights of
    // that version alone; and those differ from the base (positive control: the adapters trained).
    const weights = new RunChannels(openWire(run.nc, run.config.run)).weights;
    const adapter = await weights.fetchAdapter(steps);
    assert.ok(adapter, `adapters of v${steps} in the object store`);
    const merged = await weights.fetch(steps);
    const base = await weights.fetchLoraBase(adapter.baseSha256);
    assert.notDeepEqual(Buffer.from(merged), Buffer.from(base), "the adapters moved the weights");
    const m = createPolicyModel(run.config, { threads: 1 });
    try {
      m.loadSafetensors(merged);
      const prompt = [1, 51, 43, 52, 61];
      const [ref] = await m.generate({ prompts: [Int32Array.from(prompt)], seeds: [1], maxNewTokens: 6, temperature: 0, topP: 1, topK: 0 });
      const res = await fetch(`${server.url}/inference/v1/generate`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ token_ids: prompt, model: `fleetlora-v${steps}`, sampling_params: { max_tokens: 6, temperature: 0, ignore_eos: true } }),
      });
      const body = (await res.json()) as { choices: { token_ids: number[]; weight_versions: { version: string }[] }[] };
      assert.equal(res.status, 200, JSON.stringify(body));
      assert.deepEqual(body.choices[0]!.token_ids, Array.from(ref!.tokens).slice(0, body.choices[0]!.token_ids.length));
      assert.deepEqual(
        body.choices[0]!.weight_versions.map((w) => w.version),
        [`fleetlora-v${steps}`],
      );
    } finally {
      m.dispose();
    }
    process.stdout.write(`fleet-lora: ${scored.length} batches, ${tokens} tokens, versions ${[...versionsSeen].sort((a, b) => a - b)}, loads ${log.length}\n`);
  } finally {
    await run.close().catch(() => undefined);
    await server?.stop();
    delete process.env.ROLLSTREAM_ENV_PATH;
    rmSync(envDir, { recursive: true, force: true });
  }
});
