// The dashboard of a finished run with no server up, as a user starts it: `rollstream train` ran to the end
// and stopped its own nats-server, `rollstream replay` re-ran two steps, then `rollstream dashboard --run R`
// serves the run's stored streams itself. In a real chromium: every chart renders, the plotted loss equals
// the run's steps.jsonl, the rollout browser's newest group matches the stored stream (text and rewards),
// the token view renders with the learner's logprobs, filters narrow the list, and the replay shows up.
// Ctrl-C stops the dashboard and the nats-server it started.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import type { Page } from "playwright-core";
import { launchChromium } from "../helpers/chromium.js";
import { connect } from "@nats-io/transport-node";
import { cliMain, exitOf, storedMessages, tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { writeSpreadEnv } from "../helpers/spread-env.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { runNames, StepRecordSchema } from "../../streams/index.js";
import { startNatsServer } from "../../deploy/local/nats-server.js";
import { jetstreamManager } from "@nats-io/jetstream";

const SHOTS = join(process.cwd(), "dist", "screenshots");

const series = (page: Page, name: string) =>
  page.evaluate((n) => (window as unknown as { __series: Record<string, [number[], (number | null)[]]> }).__series[n], name) as Promise<
    [number[], (number | null)[]] | undefined
  >;

test("the dashboard of a finished run serves its stored streams with no server up: charts, rollouts, token view, filters, replays", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-dash-done-"));
  const cfgPath = join(dir, "run.yaml");
  writeFileSync(
    cfgPath,
    stringify(
      tinyConfig("done", dir, {
        environments: [{ id: "spread@^1" }],
        rl: {
          steps: 6,
          batchSize: 8,
          groupSize: 4,
          maxAsyncLevel: 1,
          maxOffPolicySteps: 2,
          sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 },
          optimizer: { lr: 0.003 },
        },
        eval: { interval: 3, n: 6 },
        checkpoint: { interval: 2, keepLast: 4, keepVersions: 10 },
      }),
    ),
  );
  const env: NodeJS.ProcessEnv = { ...process.env, ROLLSTREAM_BLAS: "off", ROLLSTREAM_ENV_PATH: writeSpreadEnv(dir) };
  delete env.NATS_URL; // train starts and stops its own server; dashboard and replay serve the stored streams
  let dash: ChildProcess | null = null;
  const browser = await launchChromium(["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]);
  try {
    const train = spawnSync(process.execPath, [cliMain, "train", cfgPath, "--no-dashboard"], { env, encoding: "utf8", timeout: 180_000 });
    assert.equal(train.status, 0, `${train.stdout}\n${train.stderr}`);
    const replay = spawnSync(process.execPath, [cliMain, "replay", "--config", cfgPath, "--checkpoint", "2", "--steps", "2"], {
      env,
      encoding: "utf8",
      timeout: 120_000,
    });
    assert.equal(replay.status, 0, `${replay.stdout}\n${replay.stderr}`);

    dash = spawn(process.execPath, [cliMain, "dashboard", "--run", "done", "--out-dir", dir, "--port", "0"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    dash.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    dash.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    await waitUntil("the dashboard's URL", () => /dashboard of run done: http:\/\/127\.0\.0\.1:\d+/.test(out), 30_000);
    assert.match(out, /serving the run's stored streams from /, "no server was up: the dashboard served the store itself");
    const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(out)![1]!;

    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await page.goto(url);
    await page.waitForSelector("body[data-loaded='1']", { timeout: 30_000 });
    await page.waitForFunction(() => document.querySelector("#overview")?.textContent?.includes("status done"), null, { timeout: 10_000 });
    const charts = await page.$$eval(".chart", (els) => els.map((e) => [e.getAttribute("data-chart"), e.querySelector("canvas") !== null] as const));
    const names = charts.map(([n]) => n);
    for (const expected of ["loss", "gradNorm", "stalenessMean", "stepTime", "rewardByEnv", "passRateByEnv", "tokensPerSec", "evalPassAt1", "evalPassAt1ByEnv"])
      assert.ok(names.includes(expected), `${expected} in ${names}`);
    assert.ok(
      charts.every(([, canvas]) => canvas),
      "every chart has a canvas",
    );
    // The plotted loss is steps.jsonl's, step by step (the last record of a step wins, as replay reads it).
    const recorded = new Map<number, number>();
    for (const line of readFileSync(join(dir, "done", "steps.jsonl"), "utf8").split("\n")) {
      if (!line) continue;
      const r = StepRecordSchema.parse(JSON.parse(line));
      recorded.set(r.step, r.loss);
    }
    const loss = (await series(page, "loss"))!;
    assert.deepEqual(loss[0], [...recorded.keys()]);
    assert.deepEqual(loss[1], [...recorded.values()]);
    const stepTime = (await series(page, "stepTime"))!;
    assert.equal(stepTime[1].filter((x) => typeof x === "number" && x >= 0).length, recorded.size, "every step has its wait time");
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: join(SHOTS, "dashboard-finished-charts.png"), fullPage: true });

    // Rollouts: the newest group against the stored stream (read after the dashboard stops).
    await page.click("nav button[data-tab='rollouts']");
    await page.waitForSelector("body[data-tab='rollouts']");
    const total = Number(/(\d+) group/.exec((await page.textContent("#group-count")) ?? "")?.[1]);
    assert.ok(total > 0);
    const seq = Number(await page.getAttribute("#groups tbody tr:first-child", "data-seq"));
    const listed = (await page.$$eval("#groups tbody tr", (trs) => trs.map((tr) => tr.getAttribute("data-seq")))).map(Number);
    await page.click("#groups tbody tr:first-child");
    await page.waitForSelector("#group .completion");
    const cards = await page.$$eval("#group .completion", (els) =>
      els.map((e) => ({
        head: e.querySelector("b")?.textContent ?? "",
        text: [...e.querySelectorAll("pre")].map((p) => p.textContent).join("\n"),
        tokens: e.querySelectorAll(".tokens span").length,
      })),
    );
    // The learner's logprobs arrive per completion: the token view is re-shaded by the gap, or says why not.
    await page.waitForFunction(() => [...document.querySelectorAll(".learner-note")].every((n) => !n.textContent?.includes("loading")), null, {
      timeout: 30_000,
    });
    const notes = await page.$$eval(".learner-note", (els) => els.map((e) => e.textContent ?? ""));
    assert.ok(
      notes.every((n) => /under weights v\d+; largest gap|learner logprobs: weights v\d+ cannot be read/.test(n)),
      notes.join("\n"),
    );
    await page.screenshot({ path: join(SHOTS, "dashboard-finished-rollouts.png"), fullPage: true });

    // Filters: uniform-outcome groups only, then a mean-reward bound; each listed row obeys it.
    await page.selectOption("#group-filter [name=outcome]", "uniform");
    await page.click("#group-filter button[type=submit]");
    await page.waitForSelector("body[data-groups*='outcome=uniform']");
    const uniform = await page.$$eval("#groups tbody tr", (trs) => trs.map((tr) => tr.querySelector("td:nth-child(7)")?.textContent ?? ""));
    assert.ok(uniform.length < total, `the filter narrowed the list (${uniform.length} of ${total})`);
    for (const mm of uniform) {
      const [lo, hi] = mm.split("–");
      assert.equal(lo, hi, `a uniform group has one reward (${mm})`);
    }
    await page.selectOption("#group-filter [name=outcome]", "");
    await page.fill("#group-filter [name=minReward]", "0.5");
    await page.click("#group-filter button[type=submit]");
    await page.waitForSelector("body[data-groups*='minReward=0.5']:not([data-groups*='outcome'])");
    const means = await page.$$eval("#groups tbody tr td:nth-child(6)", (tds) => tds.map((td) => Number(td.textContent)));
    assert.ok(means.length > 0 && means.length < total, `some groups, not all, have mean reward >= 0.5 (${means.length} of ${total})`);
    assert.ok(
      means.every((m) => m >= 0.5),
      `mean reward >= 0.5: ${means}`,
    );

    // The learner's logprobs under the sampler's own version agree with the sampler's (the same weights);
    // under another version they differ (the weights moved): the page shades the real gap.
    // A row sampled under one version (the engine applies new weights mid-generation, so a row may span two,
    // and every row of the newest group can): the newest listed group that has one.
    type GroupRows = { rows: { policyVersionMin: number; policyVersionMax: number; tokens: { logprob: number }[] }[] };
    let picked: { seq: number; at: number; group: GroupRows } | null = null;
    for (const s of listed) {
      const group = (await (await fetch(`${url}/api/groups/${s}`)).json()) as GroupRows;
      const at = group.rows.findIndex((r) => r.policyVersionMin === r.policyVersionMax);
      if (at >= 0) {
        picked = { seq: s, at, group };
        break;
      }
    }
    assert.ok(picked, `a listed group has a row sampled under one version (${listed.length} groups)`);
    const { at } = picked;
    const r0 = picked.group.rows[at]!;
    const learnerAt = async (v: number) =>
      ((await (await fetch(`${url}/api/groups/${picked.seq}/learner?row=${at}&version=${v}`)).json()) as { logprobs: number[] }).logprobs;
    const same = await learnerAt(r0.policyVersionMin);
    assert.ok(same.length > 0 && same.length === r0.tokens.length, "one learner logprob per completion token");
    const gaps = same.map((lp, i) => Math.abs(lp - r0.tokens[i]!.logprob));
    assert.ok(Math.max(...gaps) < 1e-3, `sampler and learner agree under v${r0.policyVersionMin}: ${gaps}`);
    const other = await learnerAt(r0.policyVersionMin === 0 ? 6 : 0);
    assert.ok(
      other.some((lp, i) => Math.abs(lp - same[i]!) > 1e-5),
      `another version's logprobs differ: ${other} vs ${same}`,
    );

    // Eval samples, checkpoints, health and the replay of two steps.
    await page.click("nav button[data-tab='eval']");
    await page.waitForSelector("body[data-tab='eval']");
    assert.ok((await page.$$("#eval-results tbody tr")).length >= 2, "eval results per version");
    await page.click("#eval-samples tbody tr:first-child");
    await page.waitForSelector("#eval-sample pre");
    await page.click("nav button[data-tab='checkpoints']");
    await page.waitForSelector("body[data-tab='checkpoints']");
    const weights = await page.$$eval("#weights tbody tr", (trs) => trs.length);
    assert.ok(weights >= 7, `every policy version announced (v0-v6 at least): ${weights}`);
    await page.click("nav button[data-tab='health']");
    await page.waitForSelector("body[data-tab='health']");
    const actors = await page.$$eval("#idle tbody tr td:first-child", (tds) => tds.map((t) => t.textContent));
    for (const a of ["learner", "inference", "reward"]) assert.ok(actors.includes(a), `idle ratios of ${a} in ${actors}`);
    await page.click("nav button[data-tab='replays']");
    await page.waitForSelector("body[data-tab='replays']");
    const verdicts = await page.$$eval(".replay tbody tr td:last-child", (tds) => tds.map((t) => t.textContent));
    assert.deepEqual(verdicts, ["bit-exact", "bit-exact"]);
    // Losses keep their digits (7 significant), and a recorded / replayed pair that differs shows where.
    const lossCells = await page.$$eval(".replay tbody tr", (trs) => trs.map((tr) => [...tr.children].slice(0, 4).map((td) => td.textContent ?? "")));
    for (const [step, , rec, replayed] of lossCells) {
      assert.equal(rec, String(Number(recorded.get(Number(step))!.toPrecision(7))), `step ${step}'s recorded loss`);
      assert.equal(replayed, rec, "bit-exact: the same figure");
    }
    const pair = await page.evaluate(() => (window as unknown as { fmtPair(a: number, b: number): string[] }).fmtPair(0.1234567891, 0.1234567999));
    assert.deepEqual(pair, ["0.12345679", "0.12345680"]);
    await page.screenshot({ path: join(SHOTS, "dashboard-finished-replays.png"), fullPage: true });

    // Ctrl-C: the dashboard exits 0 and takes its nats-server with it (the store can be served again).
    dash.kill("SIGINT");
    assert.equal(await exitOf(dash), 0, out);
    dash = null;
    const server = await startNatsServer({ storeDir: join(dir, "done", "nats") });
    try {
      const nc = await connect({ servers: server.url });
      const names_ = runNames("done");
      const stored = (await storedMessages(await jetstreamManager(nc), names_.streams.rollouts, names_.subjects.rolloutsScored)).find((m) => m.seq === seq)!;
      const rows = decodeRolloutBatch(stored.data).rows;
      assert.equal(cards.length, rows.length);
      rows.forEach((r, i) => {
        assert.equal(cards[i]!.text, r.messages.map((m) => `${m.role}${m.name ? ` (${m.name})` : ""}: ${m.content}`).join("\n"));
        assert.match(cards[i]!.head, new RegExp(`reward ${r.reward === Math.round(r.reward) ? r.reward : r.reward.toFixed(3)}`));
        assert.equal(cards[i]!.tokens, r.completionIds.length);
      });
      await nc.close();
    } finally {
      await server.stop();
    }
  } finally {
    if (dash) {
      dash.kill("SIGKILL");
      await exitOf(dash);
    }
    await browser.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
