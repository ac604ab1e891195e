// A dashboard attached to a live run, as a user has it: `rollstream train` runs with its own nats-server,
// `rollstream dashboard --run R` follows it from another terminal with a page open in chromium. The run ends
// and train stops its server. Then the dashboard still answers: /api/overview within a few seconds, saying
// the run ended and its server is gone; a fresh page loads its charts from what the dashboard read and says
// the same (never "connecting…"); the page that was open keeps the whole run (every step, not a partial
// one); every list route answers within a few seconds; Ctrl-C stops the dashboard within about 2 s.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import type { Page } from "playwright-core";
import { launchChromium } from "../helpers/chromium.js";
import { cliMain, exitOf, tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { writeSpreadEnv } from "../helpers/spread-env.js";
import { StepRecordSchema } from "../../streams/index.js";

const STEPS = 12;

/** GET `path` as JSON, failing the test if it takes longer than `ms`; also returns how long it took. */
async function timedGet<T>(url: string, ms: number): Promise<{ body: T; tookMs: number }> {
  const start = Date.now();
  const r = await fetch(url, { signal: AbortSignal.timeout(ms) }).catch((e: Error) => {
    throw new Error(`${url} did not answer within ${ms} ms (${e.message})`);
  });
  return { body: (await r.json()) as T, tookMs: Date.now() - start };
}

const lossSeries = (page: Page) =>
  page.evaluate(() => (window as unknown as { __series: Record<string, [number[], number[]]> }).__series["loss"]) as Promise<[number[], number[]] | undefined>;

test("a dashboard attached to a live run answers once the run ends and train stops its server: overview, fresh page, kept steps, Ctrl-C", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-dash-live-"));
  const cfgPath = join(dir, "run.yaml");
  writeFileSync(
    cfgPath,
    stringify(
      tinyConfig("liveend", dir, {
        environments: [{ id: "spread@^1" }],
        rl: { steps: STEPS, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 } },
      }),
    ),
  );
  const env: NodeJS.ProcessEnv = { ...process.env, ROLLSTREAM_BLAS: "off", ROLLSTREAM_ENV_PATH: writeSpreadEnv(dir) };
  delete env.NATS_URL; // train starts its own server and stops it at the end
  let train: ChildProcess | null = null;
  let dash: ChildProcess | null = null;
  const browser = await launchChromium(["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]);
  try {
    train = spawn(process.execPath, [cliMain, "train", cfgPath, "--no-dashboard"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let trainOut = "";
    train.stdout!.on("data", (d: Buffer) => (trainOut += d.toString()));
    train.stderr!.on("data", (d: Buffer) => (trainOut += d.toString()));
    const trainExit = exitOf(train);
    // train says where its server listens while it runs: the dashboard finds the live run there.
    await waitUntil("train's live server", () => existsSync(join(dir, "liveend", "nats.url")) || train!.exitCode !== null, 60_000);
    assert.equal(train.exitCode, null, trainOut);

    dash = spawn(process.execPath, [cliMain, "dashboard", "--run", "liveend", "--out-dir", dir, "--port", "0"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    dash.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    dash.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    await waitUntil("the dashboard's URL", () => /dashboard of run liveend: http:\/\/127\.0\.0\.1:\d+/.test(out) || dash!.exitCode !== null, 30_000);
    assert.doesNotMatch(out, /serving the run's stored streams/, "the dashboard follows the live server, not the store");
    const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(out)![1]!;

    // A page open while the run trains.
    const open = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await open.goto(url);
    await open.waitForSelector("body[data-loaded='1']", { timeout: 30_000 });
    assert.equal(await trainExit, 0, trainOut);
    assert.ok(!existsSync(join(dir, "liveend", "nats.url")), "train stopped its server");
    const recorded = new Set<number>();
    for (const line of readFileSync(join(dir, "liveend", "steps.jsonl"), "utf8").split("\n"))
      if (line) recorded.add(StepRecordSchema.parse(JSON.parse(line)).step);
    assert.equal(recorded.size, STEPS);

    // The overview answers within a few seconds (the first one after the server went may wait out one read),
    // says the run ended and its server is gone, and keeps what was read: the run's status and every step.
    const { body: ov, tookMs } = await timedGet<{
      status: string | null;
      step: number;
      server: { state: string; ended: boolean };
    }>(`${url}/api/overview`, 5_000);
    assert.ok(tookMs < 3_500, `/api/overview answered in ${tookMs} ms`);
    assert.equal(ov.server.state, "unreachable", JSON.stringify(ov));
    assert.equal(ov.server.ended, true);
    assert.equal(ov.status, "done", "the dashboard saw the run end before its server went");
    assert.equal(ov.step, STEPS);
    const again = await timedGet(`${url}/api/overview`, 5_000);
    assert.ok(again.tookMs < 1_000, `with the server known gone the overview answers at once (${again.tookMs} ms)`);
    // Every list route answers from what was read.
    for (const path of [
      "/api/steps",
      "/api/metrics/reward",
      "/api/evals",
      "/api/eval/results",
      "/api/queues",
      "/api/health",
      "/api/checkpoints",
      "/api/groups",
      "/api/deadletters",
      "/api/replays",
    ]) {
      const r = await timedGet<unknown>(`${url}${path}`, 5_000);
      assert.ok(r.tookMs < 3_500, `${path} answered in ${r.tookMs} ms`);
    }
    const steps = (await timedGet<{ step: number }[]>(`${url}/api/steps`, 5_000)).body;
    assert.deepEqual(new Set(steps.map((s) => s.step)), recorded, "the dashboard kept every step it read");
    // A payload is read on demand: with the server gone that is a quick 503 that says why, not a hang.
    const groups = (await timedGet<{ groups: { seq: number }[] }>(`${url}/api/groups`, 5_000)).body.groups;
    assert.ok(groups.length > 0);
    const started = Date.now();
    const payload = await fetch(`${url}/api/groups/${groups[0]!.seq}`, { signal: AbortSignal.timeout(5_000) });
    assert.equal(payload.status, 503);
    assert.match(((await payload.json()) as { error: string }).error, /server is unreachable/);
    assert.ok(Date.now() - started < 3_500);

    // A fresh page: loaded within a few seconds, says the run ended, draws every step.
    const fresh = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await fresh.goto(url);
    await fresh.waitForSelector("body[data-server='unreachable']", { timeout: 5_000 });
    await fresh.waitForSelector("body[data-loaded='1']", { timeout: 5_000 });
    const header = (await fresh.textContent("#overview")) ?? "";
    assert.match(header, /status done/);
    assert.match(header, /run ended: its server is gone/);
    assert.doesNotMatch(header, /connecting/);
    assert.deepEqual(new Set((await lossSeries(fresh))![0]), recorded);
    // The page that was open says so too, and shows the whole run, not the part read before the end.
    await open.waitForSelector("body[data-server='unreachable']", { timeout: 5_000 });
    await waitUntil("the open page's last refresh", async () => new Set((await lossSeries(open))?.[0] ?? []).size === STEPS, 5_000);

    // Ctrl-C: out within about 2 s, exit 0.
    const stopAt = Date.now();
    dash.kill("SIGINT");
    assert.equal(await exitOf(dash), 0, out);
    const stopMs = Date.now() - stopAt;
    dash = null;
    assert.ok(stopMs < 2_500, `Ctrl-C stopped the dashboard in ${stopMs} ms`);
  } finally {
    for (const child of [dash, train]) {
      if (child && child.exitCode === null) {
        child.kill("SIGKILL");
        await exitOf(child);
      }
    }
    await browser.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
