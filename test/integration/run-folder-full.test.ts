// A run folder whose disk fills mid-run (a real ENOSPC: the folder is a small tmpfs, filled by a file): train
// says "disk full" once, nothing dies, no file ends in half a line, no partial checkpoint folder stays; once
// the file is deleted the kept lines are written, the checkpoint actor goes on, and the run finishes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { startNatsServer } from "../../deploy/local/nats-server.js";
import { cliMain, exitOf, tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { fillDisk, mountTmpfs, whyNoTmpfs } from "../helpers/tmpfs.js";

const STEPS = 16;

/** Every line of a JSONL file parses: none is torn. */
function wholeLines(path: string): unknown[] {
  const text = readFileSync(path, "utf8");
  assert.ok(text === "" || text.endsWith("\n"), `${path} ends in half a line: ${JSON.stringify(text.slice(-80))}`);
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

function lastStep(runDir: string): number {
  try {
    const steps = [...readFileSync(join(runDir, "steps.jsonl"), "utf8").matchAll(/"step":(\d+),/g)];
    return steps.length ? Number(steps[steps.length - 1]![1]) : 0;
  } catch {
    return 0;
  }
}

const cannotMount = whyNoTmpfs();

test("a run folder that fills mid-run: one disk-full line, nothing torn or partial, the run goes on once space is freed", {
  skip: cannotMount ?? false,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-full-"));
  const runs = join(dir, "runs");
  mkdirSync(runs);
  assert.equal(mountTmpfs(runs, "24m"), null);
  const srv = await startNatsServer({ storeDir: join(dir, "store") });
  let train: ChildProcess | null = null;
  try {
    const cfgPath = join(dir, "run.yaml");
    const overrides = {
      rl: { steps: STEPS, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
      checkpoint: { interval: 2, keepLast: 2, keepVersions: 2 },
    };
    writeFileSync(cfgPath, stringify(tinyConfig("full", runs, overrides)));
    const runDir = join(runs, "full");
    let out = "";
    train = spawn(process.execPath, [cliMain, "train", cfgPath, "--nats", srv.url, "--no-eval", "--no-dashboard"], { stdio: ["ignore", "pipe", "pipe"] });
    train.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    train.stderr!.on("data", (d: Buffer) => (out += d.toString()));

    await waitUntil("step 4", () => lastStep(runDir) >= 4, 120_000, join(runDir, "logs"));
    const filler = fillDisk(runs);
    const said = (what: string, pattern: RegExp) =>
      waitUntil(what, () => pattern.test(out), 60_000).catch((e: Error) => {
        throw new Error(`${e.message}\ntrain said:\n${out}`);
      });
    await said("train's disk-full line", /disk full: no room left in/);
    // While RL runs its health watch names the blocked actor; once RL is done, the wait for the final checkpoint does.
    await said(
      "the checkpoint actor waiting for room",
      /(checkpoint-0 blocked|waiting for the final checkpoint): .*disk full: cannot write checkpoint step \d+/,
    );
    assert.equal(train.exitCode, null, `train still runs while the disk is full\n${out}`);
    // While full: the files end in whole lines, and no write left a partial checkpoint folder behind.
    wholeLines(join(runDir, "metrics.jsonl"));
    wholeLines(join(runDir, "steps.jsonl"));
    assert.deepEqual(
      readdirSync(join(runDir, "checkpoints")).filter((n) => n.includes(".tmp-")),
      [],
    );

    rmSync(filler);
    assert.equal(await exitOf(train), 0, out);
    assert.equal((out.match(/disk full: no room left in/g) ?? []).length, 1, `said once\n${out}`);
    assert.match(out, /disk has room again in .*: [\d.]+ KiB kept meanwhile written/);
    const steps = wholeLines(join(runDir, "steps.jsonl")) as Array<{ step: number }>;
    assert.deepEqual(
      [...new Set(steps.map((s) => s.step))].sort((a, b) => a - b),
      Array.from({ length: STEPS }, (_, i) => i + 1),
      "every step's record was kept and written",
    );
    wholeLines(join(runDir, "metrics.jsonl"));
    assert.ok(
      existsSync(join(runDir, "checkpoints", `step-${String(STEPS).padStart(8, "0")}`, "manifest.json")),
      "the final checkpoint was written once there was room",
    );
    assert.deepEqual(
      readdirSync(join(runDir, "checkpoints")).filter((n) => n.includes(".tmp-")),
      [],
    );
  } finally {
    if (train && train.exitCode === null) train.kill("SIGKILL");
    await srv.stop();
    spawnSync("umount", ["-l", runs]);
    rmSync(dir, { recursive: true, force: true });
  }
});
