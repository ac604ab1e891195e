// The live `train` display names a stopped actor: SIGSTOP the reward actor of a running `rollstream train`,
// and train says it is silent within 10 s of its last heartbeat; after SIGCONT it says it is healthy again,
// the run finishes, and the summary shows the eval curve and how long each actor waited.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { cliMain, tinyConfig, waitUntil } from "../helpers/run-fixture.js";

test("train names a SIGSTOPped actor within 10 s, and the run finishes after SIGCONT", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-train-health-"));
  const cfgPath = join(dir, "run.yaml");
  writeFileSync(
    cfgPath,
    stringify(
      tinyConfig("trainhealth", dir, {
        // Long enough that the stop lands mid-run: a tiny model steps in milliseconds.
        rl: { steps: 400, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 } },
        eval: { interval: 20, n: 8 },
        checkpoint: { interval: 10, keepLast: 2, keepVersions: 2 },
      }),
    ),
  );
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.NATS_URL;
  let out = "";
  const train = spawn(process.execPath, [cliMain, "train", cfgPath], { env, stdio: ["ignore", "pipe", "pipe"] });
  train.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  train.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => train.once("exit", (code) => resolve(code)));
  let stopped: number | null = null;
  try {
    await waitUntil("RL under way", () => /step\s+[1-9]/.test(out) || /held-out pass@1 at v0/.test(out), 90_000);
    const found = spawnSync("pgrep", ["-f", `actor reward --config ${cfgPath}`], { encoding: "utf8" })
      .stdout.trim()
      .split("\n")[0];
    assert.ok(found, "the reward actor's process");
    stopped = Number(found);
    const before = out.length;
    process.kill(stopped, "SIGSTOP");
    const t0 = Date.now();
    // 30 s to wait, 14 s to pass: on a loaded CI machine the output of a slow run says why, instead of a bare timeout.
    await waitUntil("train names reward silent", () => /health: reward-0 silent/.test(out.slice(before)), 30_000).catch((e: Error) => {
      throw new Error(`${e.message}\n--- train's output since the stop\n${out.slice(before).slice(-3000)}`);
    });
    // The heartbeat before the stop was at most 2 s old: named within 10 s of it.
    assert.ok(Date.now() - t0 < 14_000, `named after ${Date.now() - t0} ms`);
    process.kill(stopped, "SIGCONT");
    stopped = null;
    await waitUntil("healthy again", () => /health: reward-0 is healthy again/.test(out.slice(before)), 30_000).catch((e: Error) => {
      throw new Error(`${e.message}\n--- train's output since the stop\n${out.slice(before).slice(-3000)}`);
    });
    assert.equal(await exited, 0, out);
    assert.match(out, /held-out evaluation \(greedy pass@1 by policy version\):/);
    assert.match(out, /curve +v0 \d\.\d{3} +v20 \d\.\d{3} +v40 \d\.\d{3} +v60 \d\.\d{3}/);
    assert.match(out, /time spent waiting, per actor/);
    assert.match(out, /learner +busy \d+%/);
  } finally {
    if (stopped) process.kill(stopped, "SIGCONT");
    if (train.exitCode === null) train.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});
