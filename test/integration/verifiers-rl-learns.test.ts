// RL on a Python-served environment learns: examples/verifiers-reverse-text.yaml (a verifiers env-server playing
// reverse-text, its rubric scoring there; SFT on a deliberately weak teacher) trained by `rollstream train` as a
// user runs it, shortened to 40 RL steps. The held-out pass@1 after RL must beat the one after SFT by 0.15.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, stringify } from "yaml";
import { cliMain } from "../helpers/run-fixture.js";
import { PYTHON, startPythonServer } from "../helpers/python-env-server.js";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

test("RL on a verifiers env-server's reverse-text: held-out pass@1 after RL >= after SFT + 0.15", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-vf-learns-"));
  const made = spawnSync(PYTHON, [join(ROOT, "examples", "verifiers", "reverse_text_tasks.py"), join(dir, "tasks")], { encoding: "utf8" });
  assert.equal(made.status, 0, made.stderr);
  const server = await startPythonServer("verifiers_env_server.py", []);
  try {
    const config = parse(readFileSync(join(ROOT, "examples", "verifiers-reverse-text.yaml"), "utf8")) as {
      run: string;
      environments: Array<Record<string, unknown>>;
      rl: Record<string, unknown>;
      [k: string]: unknown;
    };
    config["outDir"] = dir;
    Object.assign(config.environments[0]!, {
      server: server.address,
      tasks: { train: join(dir, "tasks", "train.jsonl"), eval: join(dir, "tasks", "eval.jsonl") },
    });
    config.rl = { ...config.rl, steps: 40 };
    config["eval"] = { interval: 40, n: 200 };
    const cfg = join(dir, "run.yaml");
    writeFileSync(cfg, stringify(config));
    const env = { ...process.env };
    delete env["NATS_URL"];
    const r = spawnSync(process.execPath, [cliMain, "train", cfg, "--fresh", "--no-dashboard"], { env, encoding: "utf8", timeout: 900_000 });
    assert.equal(r.status, 0, `train exited ${r.status}: ${r.stdout.slice(-3000)}\n${r.stderr.slice(-3000)}`);
    const evals = JSON.parse(readFileSync(join(dir, config.run, "eval.json"), "utf8")) as Record<string, { passAt1: number }>;
    const versions = Object.keys(evals)
      .map(Number)
      .sort((a, b) => a - b);
    const sft = evals[String(versions[0])]!.passAt1;
    const rl = evals[String(versions.at(-1))]!.passAt1;
    console.log(`held-out pass@1: after SFT (v${versions[0]}) ${sft}, after RL (v${versions.at(-1)}) ${rl}`);
    assert.equal(versions[0], 0);
    assert.equal(versions.at(-1), 40);
    assert.ok(rl >= sft + 0.15, `pass@1 after SFT ${sft}, after RL ${rl}`);
  } finally {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
