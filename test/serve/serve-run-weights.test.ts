// `rollstream serve` on a run: started from the run's config and NATS server before any version exists (the run's
// initial weights, labelled "init"), then POST /update_weights loads a version from the run's object store
// ({version}) or an HF folder ({weight_dir}): what it serves changes to those weights and answers carry the version.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { connect } from "@nats-io/transport-node";
import { PolicyModel } from "../../kernels/index.js";
import { parseRunConfig } from "../../actors/runtime/config.js";
import { createPolicyModel, modelConfigOf } from "../../actors/runtime/model-factory.js";
import { ensureTopology } from "../../streams/topology.js";
import { RunChannels } from "../../streams/index.js";
import { startServe } from "../../serve/start.js";
import { startTestNats } from "../helpers/nats.js";
import { tinyConfig } from "../helpers/run-fixture.js";
import { alone, promptOf } from "../helpers/serve-fixture.js";
import { toHfConfig } from "../../kernels/hf-config.js";

const quiet = { info: () => undefined, error: () => undefined };

test("serve -c <run> --nats: initial weights, then a version from the object store and a folder through /update_weights", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-serve-run-"));
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  const raw = tinyConfig("servewts", dir);
  const configPath = join(dir, "run.yaml");
  writeFileSync(configPath, stringify(raw));
  const config = parseRunConfig(raw);
  const cfg = modelConfigOf(config);
  const init = createPolicyModel(config, { threads: 1 });
  const v3 = PolicyModel.create(cfg, { seed: 9, threads: 1, device: "cpu" });
  const v4 = PolicyModel.create(cfg, { seed: 10, threads: 1, device: "cpu" });
  let server: Awaited<ReturnType<typeof startServe>> | null = null;
  try {
    const topology = await ensureTopology(nc, "servewts");
    await new RunChannels(topology.wire).weights.publish({ version: 3, step: 3, phase: "rl", bytes: v3.toSafetensors() });
    server = await startServe({ source: { kind: "run", configPath, natsUrl: nats.url }, host: "127.0.0.1", port: 0, threads: 1, log: quiet });
    const post = async (path: string, body: unknown) => {
      const res = await fetch(`${server!.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: res.status, json: await res.json() };
    };
    const prompt = promptOf("3+4");
    const gen = async () => (await post("/inference/v1/generate", { token_ids: prompt, sampling_params: { max_tokens: 8, seed: 2 } })).json.choices[0];
    const first = await gen();
    assert.deepEqual(first.token_ids, (await alone(init, prompt, { maxTokens: 8, seed: 2 })).tokenIds, "the run's initial weights");
    assert.equal(first.weight_versions[0].version, "init");

    const up = await post("/update_weights", { version: 3 });
    assert.equal(up.status, 200, JSON.stringify(up.json));
    assert.equal(up.json.weight_version, "3");
    const after = await gen();
    const ref3 = await alone(v3, prompt, { maxTokens: 8, seed: 2 });
    assert.notDeepEqual(ref3.tokenIds, first.token_ids, "the versions sample differently (positive control)");
    assert.deepEqual(after.token_ids, ref3.tokenIds);
    assert.equal(after.weight_versions[0].version, "3");

    // An HF folder named v4: labelled 4 from its name.
    const folder = join(dir, "hf", "v4");
    const { mkdirSync } = await import("node:fs");
    mkdirSync(folder, { recursive: true });
    writeFileSync(join(folder, "config.json"), JSON.stringify(toHfConfig(cfg)));
    writeFileSync(join(folder, "model.safetensors"), v4.toSafetensors());
    assert.equal((await post("/update_weights", { weight_dir: folder })).json.weight_version, "4");
    assert.deepEqual((await gen()).token_ids, (await alone(v4, prompt, { maxTokens: 8, seed: 2 })).tokenIds);

    // A version the store does not have: the load fails, the weights in use stay.
    const missing = await post("/update_weights", { version: 99 });
    assert.equal(missing.status, 404, JSON.stringify(missing.json));
    assert.equal(missing.json.error.message, "version: v99 is not in the run's object store (pruned, or never written)");
    assert.deepEqual((await gen()).token_ids, (await alone(v4, prompt, { maxTokens: 8, seed: 2 })).tokenIds);
    assert.equal((await post("/update_weights", { version: 3, weight_dir: folder })).status, 400);
  } finally {
    await server?.close();
    for (const m of [init, v3, v4]) m.dispose();
    await nc.close();
    await nats.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});
