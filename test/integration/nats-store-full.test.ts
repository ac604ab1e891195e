// `train` with its own nats-server, the run folder (and so the server's store under runs/<run>/nats) on a small
// tmpfs that fills mid-run: a real ENOSPC under the server, which stops Debian's nats-server's JetStream for good.
// train says the store's disk is full, once; when the filler is deleted it brings JetStream back by itself (a
// restart of its server on the same store) and the run finishes with every step recorded: no one restarts
// anything by hand. test/cli/store-disk-watch.test.ts checks the premise (room alone does not bring it back).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { stringify } from "yaml";
import { cliMain, exitOf, tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { fillDisk, mountTmpfs, whyNoTmpfs } from "../helpers/tmpfs.js";

const STEPS = 16;
const cannotMount = whyNoTmpfs();

function steps(runDir: string): number[] {
  try {
    return [...readFileSync(join(runDir, "steps.jsonl"), "utf8").matchAll(/"step":(\d+),/g)].map((m) => Number(m[1]));
  } catch {
    return [];
  }
}

test("the disk under train's own NATS store fills mid-run: said once, JetStream brought back by train, the run finishes", {
  skip: cannotMount ?? false,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-store-full-"));
  const runs = join(dir, "runs");
  mkdirSync(runs);
  assert.equal(mountTmpfs(runs, "96m"), null);
  let train: ChildProcess | null = null;
  try {
    const cfgPath = join(dir, "run.yaml");
    const overrides = {
      rl: { steps: STEPS, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
      checkpoint: { interval: 2, keepLast: 2, keepVersions: 2 },
      // The server reserves the events stream's cap on its disk: 1 GiB by default, more than this tmpfs.
      nats: { eventsMaxBytes: 16 * 2 ** 20 },
    };
    writeFileSync(cfgPath, stringify(tinyConfig("storefull", runs, overrides)));
    const runDir = join(runs, "storefull");
    let out = "";
    const env = { ...process.env };
    delete env.NATS_URL;
    train = spawn(process.execPath, [cliMain, "train", cfgPath, "--no-eval", "--no-dashboard"], { stdio: ["ignore", "pipe", "pipe"], env });
    train.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    train.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    await waitUntil("step 4", () => Math.max(0, ...steps(runDir)) >= 4, 120_000, join(runDir, "logs")).catch((e: Error) => {
      throw new Error(`${e.message}\ntrain said:\n${out}`);
    });
    assert.match(out, /started nats-server at .* \(store .*storefull\/nats/, "train runs its own server, its store on the tmpfs");

    const filler = fillDisk(runs);
    await waitUntil("the store's disk-full line", () => /disk full: the NATS store's disk \(.*storefull\/nats\)/.test(out), 30_000).catch((e: Error) => {
      throw new Error(`${e.message}\ntrain said:\n${out}`);
    });
    // Full for a while: the actors' writes meet ENOSPC in the store (the learner publishes weights every step).
    await sleep(8_000);
    assert.equal(train.exitCode, null, `train still runs while the disk is full\n${out}`);
    rmSync(filler);

    assert.equal(await exitOf(train), 0, out);
    assert.equal((out.match(/disk full: the NATS store's disk/g) ?? []).length, 1, `said once\n${out}`);
    // Either JetStream met the ENOSPC (then train restarted it: the usual case, the learner writes every step)
    // or it never wrote while full (then it answers and room is said).
    assert.match(out, /restarting the run's nats-server on the same store|the NATS store's disk has room again/, out);
    assert.deepEqual(
      [...new Set(steps(runDir))].sort((a, b) => a - b),
      Array.from({ length: STEPS }, (_, i) => i + 1),
      `every step's record was written\n${out}`,
    );
    assert.match(out, /RL finished|already done|RL changed|done/i);
  } finally {
    if (train && train.exitCode === null) train.kill("SIGKILL");
    // train's server is in a session of its own: stop whatever still runs on the store before unmounting.
    spawnSync("pkill", ["-9", "-f", join(runs, "storefull", "nats")]);
    await sleep(200);
    spawnSync("umount", ["-l", runs]);
    rmSync(dir, { recursive: true, force: true });
  }
});
