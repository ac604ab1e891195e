// `rollstream train` rides through NATS outages: a kill -9 of the run's server and a restart on the same
// port and store (1 s and 10 s down), and a kill -9 of the server train started itself, which it brings
// back. The run finishes, every task is scored exactly once, and train reports each outage.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { startNatsServer } from "../../deploy/local/nats-server.js";
import { cliMain, exitOf, storedMessages, tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { openWire, RunChannels } from "../../streams/index.js";

const STEPS = 24;

function writeConfig(dir: string, run: string): string {
  const cfgPath = join(dir, "run.yaml");
  writeFileSync(
    cfgPath,
    stringify(
      tinyConfig(run, dir, {
        rl: { steps: STEPS, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
        checkpoint: { interval: 4, keepLast: 2, keepVersions: 3 },
        nats: { taskAckWaitMs: 3000 },
      }),
    ),
  );
  return cfgPath;
}

/** Learner step from the run's steps file (train writes it; it survives the outage). */
function stepFromMetrics(dir: string, run: string): number {
  try {
    const steps = [...readFileSync(join(dir, run, "steps.jsonl"), "utf8").matchAll(/"step":(\d+),/g)];
    return steps.length ? Number(steps[steps.length - 1]![1]) : 0;
  } catch {
    return 0;
  }
}

async function scoredOnce(url: string, run: string): Promise<{ tasks: number; twice: string[] }> {
  const nc = await connect({ servers: url });
  try {
    const wire = openWire(nc, run);
    void new RunChannels(wire);
    const seen = new Map<string, number>();
    for (const m of await storedMessages(await jetstreamManager(nc), wire.names.streams.rollouts, wire.names.subjects.rolloutsScored)) {
      const id = decodeRolloutBatch(m.data).rows[0]!.taskId;
      seen.set(id, (seen.get(id) ?? 0) + 1);
    }
    return { tasks: seen.size, twice: [...seen.entries()].filter(([, n]) => n > 1).map(([id]) => id) };
  } finally {
    await nc.close();
  }
}

test("train rides through kill -9 of its NATS server (1 s and 10 s down); every task scored once", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-outage-"));
  const store = join(dir, "store");
  let srv = await startNatsServer({ storeDir: store });
  const { port, monitorPort } = srv;
  try {
    const cfgPath = writeConfig(dir, "outage");
    let out = "";
    const train = spawn(process.execPath, [cliMain, "train", cfgPath, "--nats", srv.url, "--no-eval"], { stdio: ["ignore", "pipe", "pipe"] });
    train.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    train.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    for (const [atStep, downMs] of [
      [4, 1000],
      [12, 10_000],
    ] as const) {
      await waitUntil(`step ${atStep}`, () => stepFromMetrics(dir, "outage") >= atStep, 90_000, join(dir, "outage", "logs"));
      srv.process.kill("SIGKILL");
      await exitOf(srv.process);
      await new Promise((r) => setTimeout(r, downMs));
      srv = await startNatsServer({ storeDir: store, port, monitorPort });
    }
    assert.equal(await exitOf(train), 0, out);
    assert.equal((out.match(/NATS back after/g) ?? []).length >= 2, true, out);
    assert.match(out, /rode through \d+ NATS outage/);
    const { tasks, twice } = await scoredOnce(srv.url, "outage");
    assert.deepEqual(twice, [], "no task scored twice");
    assert.ok(tasks >= STEPS * 2, `${tasks} distinct tasks scored for ${STEPS} steps of 2 tasks`);
  } finally {
    await srv.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("train restarts the nats-server it started when that server is killed, on the same store", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-outage-own-"));
  try {
    const cfgPath = writeConfig(dir, "ownsrv");
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.NATS_URL;
    let out = "";
    const train = spawn(process.execPath, [cliMain, "train", cfgPath, "--no-eval"], { env, stdio: ["ignore", "pipe", "pipe"] });
    train.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    train.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    await waitUntil("step 6", () => stepFromMetrics(dir, "ownsrv") >= 6, 90_000, join(dir, "ownsrv", "logs"));
    const conf = join(dir, "ownsrv", "nats", "nats.conf");
    const killed = spawnSync("pkill", ["-KILL", "-f", conf]);
    assert.equal(killed.status, 0, "the run's own nats-server was found and killed");
    assert.equal(await exitOf(train), 0, out);
    assert.match(out, /nats-server exited .*restarting it on the same store/);
    const url = /started nats-server at (nats:\/\/127\.0\.0\.1:\d+)/.exec(out)![1]!;
    // train stopped its server at the end: serve the store again to count what it holds.
    const again = await startNatsServer({ storeDir: join(dir, "ownsrv", "nats"), port: Number(new URL(url.replace("nats:", "http:")).port) });
    try {
      const { tasks, twice } = await scoredOnce(again.url, "ownsrv");
      assert.deepEqual(twice, []);
      assert.ok(tasks >= STEPS * 2, `${tasks} distinct tasks`);
    } finally {
      await again.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
