// `rollstream train` as a user runs it: its own nats-server, Ctrl-C drains and stops everything it
// started, the same command resumes and finishes, and `rollstream inspect` decodes what is in the run.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect as netConnect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { cliMain, exitOf, tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { startTestNats } from "../helpers/nats.js";
import { procStat } from "../../sandbox/test/proc.js";

/** The live children of a process, with their command lines. */
function childrenOf(ppid: number): Array<{ pid: number; args: string }> {
  const out: Array<{ pid: number; args: string }> = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (procStat(Number(name), 1) !== ppid) continue;
      out.push({ pid: Number(name), args: readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0").join(" ").trim() });
    } catch {
      // gone since the listing
    }
  }
  return out;
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = netConnect(port, "127.0.0.1");
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

test("train: Ctrl-C drains the actors and stops its nats-server; rerunning resumes from the checkpoint and finishes", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-train-cli-"));
  const cfgPath = join(dir, "run.yaml");
  writeFileSync(
    cfgPath,
    stringify(
      tinyConfig("cli", dir, {
        sft: { steps: 4, batchSize: 8 },
        // Enough steps that Ctrl-C lands mid-run: a tiny model steps in milliseconds.
        rl: { steps: 80, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 } },
        checkpoint: { interval: 4, keepLast: 2, keepVersions: 2 },
      }),
    ),
  );
  // The embedded mode: no NATS_URL, so train starts its own server.
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.NATS_URL;
  try {
    let out = "";
    const first = spawn(process.execPath, [cliMain, "train", cfgPath], { env, stdio: ["ignore", "pipe", "pipe"] });
    first.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    first.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    const metrics = join(dir, "cli", "metrics.jsonl");
    const stepsFile = join(dir, "cli", "steps.jsonl");
    await waitUntil(
      "some RL steps with a checkpoint",
      () => {
        if (!existsSync(metrics) || !existsSync(stepsFile)) return false;
        const text = readFileSync(metrics, "utf8");
        return text.includes('"kind":"checkpoint"') && /"step":(6|7|8|9|1\d),/.test(readFileSync(stepsFile, "utf8"));
      },
      90_000,
    );
    const port = Number(/nats:\/\/127\.0\.0\.1:(\d+)/.exec(out)![1]);
    assert.ok(await portOpen(port));
    // Each actor and the server lead a session of their own (the CPU share autogroups give a session); train
    // itself, spawned here without one, is the control: it shares this test's session.
    const started = childrenOf(first.pid!);
    assert.ok(started.length >= 5, `train's children: ${started.map((c) => c.args).join(" | ")}`);
    for (const c of started) assert.equal(procStat(c.pid, 3), c.pid, `${c.args} leads its own session`);
    assert.ok(
      started.some((c) => c.args.includes("nats-server")),
      "the nats-server is among them",
    );
    assert.notEqual(procStat(first.pid!, 3), first.pid, "train itself was started in this test's session");
    first.kill("SIGINT");
    assert.equal(await exitOf(first), 130, out);
    assert.match(out, /stopped; run the same command to resume/);
    assert.equal(await portOpen(port), false, "the nats-server it started is stopped");

    const second = spawnSync(process.execPath, [cliMain, "train", cfgPath], { env, encoding: "utf8", timeout: 120_000 });
    assert.equal(second.status, 0, second.stdout + second.stderr);
    assert.match(second.stdout, /held-out evaluation \(greedy pass@1 by policy version\):/);
    assert.match(second.stdout, /after RL +pass@1 \d\.\d{3}/);
    const learnerLog = readFileSync(join(dir, "cli", "logs", "learner-0.log"), "utf8");
    assert.match(learnerLog, /restored from checkpoint/);
    const evals = JSON.parse(readFileSync(join(dir, "cli", "eval.json"), "utf8"));
    // The evaluator's results by version: v0 and the final one at least, evaluated once each.
    assert.equal(evals["80"].version, 80);
    assert.equal(typeof evals["0"].passAt1, "number");
    // A third run sees the run is done and says so.
    const third = spawnSync(process.execPath, [cliMain, "train", cfgPath], { env, encoding: "utf8", timeout: 60_000 });
    assert.equal(third.status, 0, third.stdout + third.stderr);
    assert.match(third.stdout, /already finished/);
    // With no server named (no --nats, no NATS_URL), inspect and replay serve the run's own stored
    // streams, even when some other server answers at the default URL (as on a machine running one).
    const inspect = spawnSync(process.execPath, [cliMain, "inspect", "--config", cfgPath], { env, encoding: "utf8", timeout: 60_000 });
    assert.equal(inspect.status, 0, inspect.stdout + inspect.stderr);
    assert.match(inspect.stderr, /serving the run's stored streams/);
    assert.match(inspect.stdout, /stream RS_CLI_ROLLOUTS: \d+ msgs/);
    const replay = spawnSync(process.execPath, [cliMain, "replay", "--config", cfgPath, "--steps", "1"], { env, encoding: "utf8", timeout: 60_000 });
    assert.equal(replay.status, 0, replay.stdout + replay.stderr);
    assert.match(replay.stdout, /bit-exact/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("inspect lists streams, consumers and state, and decodes Arrow and msgpack messages with headers", async () => {
  const nats = await startTestNats();
  const dir = mkdtempSync(join(tmpdir(), "rs-inspect-"));
  try {
    const cfgPath = join(dir, "run.yaml");
    writeFileSync(
      cfgPath,
      stringify(
        tinyConfig("insp", dir, {
          rl: { steps: 2, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 } },
        }),
      ),
    );
    const run = spawnSync(process.execPath, [cliMain, "train", cfgPath, "--nats", nats.url, "--no-eval"], { encoding: "utf8", timeout: 90_000 });
    assert.equal(run.status, 0, run.stdout + run.stderr);
    const overview = spawnSync(process.execPath, [cliMain, "inspect", "--run", "insp", "--nats", nats.url], { encoding: "utf8" });
    assert.equal(overview.status, 0, overview.stderr);
    assert.match(overview.stdout, /stream RS_INSP_ROLLOUTS: \d+ msgs/);
    assert.match(overview.stdout, /rs\.insp\.rollouts\.scored: 4/);
    assert.match(overview.stdout, /consumer inference: pending 0/);
    assert.match(overview.stdout, /policy\.version = 2/);
    const scored = spawnSync(
      process.execPath,
      [cliMain, "inspect", "--run", "insp", "--nats", nats.url, "-s", "rs.insp.rollouts.scored", "-n", "2", "--json"],
      { encoding: "utf8" },
    );
    assert.equal(scored.status, 0, scored.stderr);
    assert.match(scored.stdout, /Content-Type: application\/vnd\.apache\.arrow\.stream/);
    assert.match(scored.stdout, /arrow batch: 4 rows/);
    assert.match(scored.stdout, /"env": "arithmetic@1\.0\.0"/);
    // The acceptance command of the wire contract: a scored batch's rubric metrics (arithmetic's
    // zero-weight "format") are visible in the table.
    const table = spawnSync(process.execPath, [cliMain, "inspect", "--run", "insp", "--nats", nats.url, "-s", "rs.insp.rollouts.scored", "-n", "1"], {
      encoding: "utf8",
    });
    assert.equal(table.status, 0, table.stderr);
    assert.match(table.stdout, /metrics/);
    assert.match(table.stdout, /format=\d/);
    const tasks = spawnSync(process.execPath, [cliMain, "inspect", "--run", "insp", "--nats", nats.url, "-s", "rs.insp.weights", "-n", "1"], {
      encoding: "utf8",
    });
    assert.match(tasks.stdout, /"object":"v2"/);
  } finally {
    await nats.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});
