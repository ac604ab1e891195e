// vLLM's LoRA routes on a real `rollstream serve`: a PEFT adapter folder loads onto the base and the server then
// samples exactly what the merged model samples alone (positive control: the adapter does change the answer), the
// answers' spans carry the adapter's name, /v1/models lists it, a request naming another model is a 404 (vLLM's
// message; the openai client reads it as NotFoundError), a name loaded twice is a 400, unloading is 200 then 404;
// after a full-weight load an adapter merges into the new base.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { LoraAdapters, LoraSchema, loraTargets } from "../../kernels/lora.js";
import { PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE, toPeft } from "../../kernels/lora-peft.js";
import { startServe, type RunningServer } from "../../serve/start.js";
import { alone, promptOf, tinyModel, writeHfFolder } from "../helpers/serve-fixture.js";

let server: RunningServer;
let dir: string;
const quiet = { info: () => undefined, error: () => undefined };
type Json = ReturnType<typeof JSON.parse>;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "rs-serve-lora-"));
  writeHfFolder(join(dir, "v0"), 3);
  writeHfFolder(join(dir, "v7"), 4);
  server = await startServe({ source: { kind: "folder", path: join(dir, "v0") }, host: "127.0.0.1", port: 0, threads: 1, log: quiet });
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

async function post(path: string, body: unknown): Promise<{ status: number; text: string; json: Json }> {
  const res = await fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await res.text();
  let json: Json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, text, json };
}

/** Adapters with nonzero A and B (seeded) on the tiny model of `baseSeed`, written as PEFT's folder; and the merged model. */
function adapterFolder(name: string, baseSeed: number, seed: number) {
  const base = tinyModel(baseSeed);
  const settings = LoraSchema.parse({ rank: 4, alpha: 8, targetModules: ["q_proj", "v_proj", "down_proj"] });
  const targets = loraTargets(base.tensors(), settings);
  const n = targets.reduce((s, t) => s + settings.rank * (t.in + t.out), 0);
  let x = seed;
  const params = Float32Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    return (x / 2 ** 31 - 0.5) * 0.6;
  });
  const adapters = new LoraAdapters(settings, targets, base.getParams(), params);
  const peft = toPeft(adapters, "tiny");
  const folder = join(dir, name);
  mkdirSync(folder, { recursive: true });
  writeFileSync(join(folder, PEFT_CONFIG_FILE), peft.config);
  writeFileSync(join(folder, PEFT_WEIGHTS_FILE), peft.weights);
  base.setParams(adapters.merged(base.getParams()));
  return { folder, merged: base };
}

const gen = (token_ids: number[], model?: string) =>
  post("/inference/v1/generate", { token_ids, model, sampling_params: { max_tokens: 8, temperature: 1, seed: 21, logprobs: 0 } });

test("load_lora_adapter: the server samples base + adapter exactly, labelled by the adapter's name", async () => {
  const { folder, merged } = adapterFolder("run-v1", 3, 11);
  const plain = tinyModel(3);
  try {
    const prompt = promptOf("3+4=");
    const ref = await alone(merged, prompt, { maxTokens: 8, seed: 21 });
    const refBase = await alone(plain, prompt, { maxTokens: 8, seed: 21 });
    assert.notDeepEqual(ref.tokenIds, refBase.tokenIds, "positive control: the adapter changes what is sampled");
    // Not loaded yet: a request naming it is vLLM's 404.
    const missing = await gen(prompt, "run-v1");
    assert.equal(missing.status, 404);
    assert.equal(missing.json.error.message, "model: The model `run-v1` does not exist.");
    const before = await gen(prompt);
    assert.deepEqual(before.json.choices[0].token_ids, refBase.tokenIds);

    const load = await post("/v1/load_lora_adapter", { lora_name: "run-v1", lora_path: folder });
    assert.equal(load.status, 200, load.text);
    assert.equal(load.text, "Success: LoRA adapter 'run-v1' added successfully.");
    const r = await gen(prompt, "run-v1");
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.choices[0].token_ids, ref.tokenIds);
    assert.deepEqual(
      r.json.choices[0].logprobs.content.map((c: { logprob: number }) => c.logprob),
      ref.logprobs,
    );
    assert.deepEqual(r.json.choices[0].weight_versions, [{ version: "run-v1", start: 0, end: ref.tokenIds.length }]);
    const log = (await (await fetch(`${server.url}/weight_updates`)).json()) as { updates: { version: string; source: string }[] };
    assert.deepEqual(log.updates.at(-1), { ...log.updates.at(-1)!, version: "run-v1", source: folder });

    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: { id: string; parent: string | null; root: string }[] };
    assert.deepEqual(
      models.data.map((m) => [m.id, m.parent]),
      [
        ["v0", null],
        ["run-v1", "v0"],
      ],
    );
    // The openai client: the adapter by name works, another name is its NotFoundError.
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
    const c = await client.completions.create({ model: "run-v1", prompt: "3+4=", max_tokens: 2 });
    assert.equal(c.model, "v0");
    await assert.rejects(client.completions.create({ model: "run-v9", prompt: "3+4=", max_tokens: 2 }), (e: unknown) => e instanceof OpenAI.NotFoundError);
    // SGLang's lora_path is checked the same way.
    const sgl = await post("/generate", { input_ids: prompt, lora_path: "run-v9", sampling_params: { max_new_tokens: 2 } });
    assert.equal(sgl.status, 404);

    const again = await post("/v1/load_lora_adapter", { lora_name: "run-v1", lora_path: folder });
    assert.equal(again.status, 400);
    assert.match(again.json.error.message, /has already been loaded/);
    const bad = await post("/v1/load_lora_adapter", { lora_name: "run-v2", lora_path: join(dir, "v0") });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /not a PEFT adapter folder/);
    assert.equal((await post("/v1/unload_lora_adapter", { lora_name: "run-v1" })).status, 200);
    const gone = await post("/v1/unload_lora_adapter", { lora_name: "run-v1" });
    assert.equal(gone.status, 404);
    assert.equal(gone.json.error.message, "The lora adapter 'run-v1' cannot be found.");
  } finally {
    merged.dispose();
    plain.dispose();
  }
});

test("after a full-weight load, an adapter merges into the new base", async () => {
  const upd = await post("/update_weights_from_disk", { model_path: join(dir, "v7"), weight_version: "base-7" });
  assert.equal(upd.status, 200, upd.text);
  const { folder, merged } = adapterFolder("run-v2", 4, 12);
  try {
    assert.equal((await post("/v1/load_lora_adapter", { lora_name: "run-v2", lora_path: folder })).status, 200);
    const prompt = promptOf("8+8=");
    const ref = await alone(merged, prompt, { maxTokens: 8, seed: 21 });
    const r = await gen(prompt, "run-v2");
    assert.deepEqual(r.json.choices[0].token_ids, ref.tokenIds);
  } finally {
    merged.dispose();
  }
});
