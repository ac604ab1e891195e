// The dashboard in a real browser (Debian's chromium, headless, driven by playwright-core) over a real short
// run: every chart renders, the plotted loss equals the learner's recorded losses, the rollout browser shows
// a group whose text and rewards equal the stream's, the token view renders, and dead letters are listed.
// Screenshots go to dist/screenshots/.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { launchChromium } from "../helpers/chromium.js";
import { startRun, storedMessages, storedSteps, waitUntil } from "../helpers/run-fixture.js";
import { StateKeys } from "../../streams/index.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { startDashboard } from "../../cli/dashboard/server.js";
import { createTokenizer } from "../../actors/runtime/model-factory.js";
import { testSampling } from "../helpers/rollout-fixtures.js";

const SHOTS = join(process.cwd(), "dist", "screenshots");

test("the dashboard renders a run's charts, rollouts, token view and dead letters in chromium", async () => {
  const run = await startRun("dash", {
    // Two-digit sums: arithmetic offers its "hard" split beside the eval split.
    environments: [{ id: "arithmetic@^1", args: { digits: 2, ops: ["+"], seed: 3 } }],
    rl: { steps: 6, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling },
    eval: { interval: 3, n: 6 },
  });
  const browser = await launchChromium([
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ]);
  let dash: Awaited<ReturnType<typeof startDashboard>> | null = null;
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "inference", "reward", "evaluator"]) run.launcher.start({ name, replica: 0 });
    // One dead letter, so that page has something to show.
    await run.js.publish(run.topology.names.subjects.tasks, new TextEncoder().encode("not msgpack"), { msgID: "garbage" });
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 90_000, join(run.dir, "logs"));
    await waitUntil("final evaluation", async () => (await run.state.get(StateKeys.evalResults))?.["6"] !== undefined, 60_000);
    dash = await startDashboard({ nc: run.nc, run: "dash", tokenizer: createTokenizer(run.config), pushMs: 500 });
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await page.goto(dash.url);
    await page.waitForSelector("body[data-loaded='1']", { timeout: 20_000 });
    await page.waitForFunction(() => document.querySelector("#overview")?.textContent?.includes("status done"), null, { timeout: 10_000 });

    // Every chart rendered a canvas, the eval curve among them.
    const charts = await page.$$eval(".chart", (els) => els.map((e) => [e.getAttribute("data-chart"), e.querySelector("canvas") !== null]));
    const names = charts.map(([n]) => n);
    for (const expected of ["loss", "entropy", "mismatchKl", "gradNorm", "stalenessMean", "rewardByEnv", "evalPassAt1"])
      assert.ok(names.includes(expected), `${expected} in ${names}`);
    assert.ok(
      charts.every(([, canvas]) => canvas),
      "every chart has a canvas",
    );
    // The plotted loss is the learner's record, step by step.
    const recorded = await storedSteps(run);
    const plotted = (await page.evaluate(() => (window as unknown as { __series: Record<string, [number[], number[]]> }).__series["loss"])) as [
      number[],
      number[],
    ];
    assert.deepEqual(
      plotted[0],
      recorded.map((e) => e.step),
    );
    assert.deepEqual(
      plotted[1],
      recorded.map((e) => e.loss),
    );
    const evalCurve = (await page.evaluate(() => (window as unknown as { __series: Record<string, [number[], number[]]> }).__series["evalPassAt1"])) as [
      number[],
      number[],
    ];
    assert.deepEqual(evalCurve[0], [0, 3, 6]);
    // The hard split is drawn beside the eval split, from the evaluator's record, never in its place.
    const evals = (await run.state.get(StateKeys.evalResults))!;
    assert.deepEqual(
      evalCurve[1],
      [0, 3, 6].map((v) => evals[String(v)]!.passAt1),
    );
    const labels = await page.$$eval(".chart[data-chart='evalPassAt1'] .u-legend .u-series th", (ths) => ths.map((t) => t.textContent?.trim()));
    assert.ok(
      labels.some((l) => l?.includes("hard split")),
      `legend: ${labels}`,
    );
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: join(SHOTS, "dashboard-charts.png"), fullPage: true });

    // The rollout browser: the newest group, its completions' text and rewards as the stream has them.
    await page.click("nav button[data-tab='rollouts']");
    const seq = Number(await page.getAttribute("#groups tbody tr:first-child", "data-seq"));
    await page.click("#groups tbody tr:first-child");
    await page.waitForSelector("#group .completion");
    const stored = (await storedMessages(run.topology.jsm, run.topology.names.streams.rollouts, run.topology.names.subjects.rolloutsScored)).find(
      (m) => m.seq === seq,
    )!;
    const rows = decodeRolloutBatch(stored.data).rows;
    const cards = await page.$$eval("#group .completion", (els) =>
      els.map((e) => ({
        head: e.querySelector("b")?.textContent ?? "",
        text: [...e.querySelectorAll("pre")].map((p) => p.textContent).join("\n"),
        tokens: e.querySelectorAll(".tokens span").length,
      })),
    );
    assert.equal(cards.length, rows.length);
    rows.forEach((r, i) => {
      assert.equal(cards[i]!.text, r.messages.map((m) => `${m.role}${m.name ? ` (${m.name})` : ""}: ${m.content}`).join("\n"));
      assert.match(cards[i]!.head, new RegExp(`reward ${r.reward === Math.round(r.reward) ? r.reward : r.reward.toFixed(3)}`));
      assert.equal(cards[i]!.tokens, r.completionIds.length, "the token view shows every completion token");
    });
    await page.screenshot({ path: join(SHOTS, "dashboard-rollouts.png"), fullPage: true });

    // Eval results name their split.
    await page.click("nav button[data-tab='eval']");
    await page.waitForSelector("body[data-tab='eval']");
    const splits = await page.$$eval("#eval-results tbody tr td:nth-child(2)", (tds) => tds.map((t) => t.textContent));
    assert.ok(splits.includes("eval") && splits.includes("hard"), `splits listed: ${splits}`);

    await page.click("nav button[data-tab='deadletters']");
    const reasons = await page.$$eval("#dlq tbody tr td:nth-child(2)", (els) => els.map((e) => e.textContent ?? ""));
    assert.ok(reasons.length >= 1 && reasons.some((r) => r.length > 0), `dead letters listed: ${reasons}`);
  } finally {
    await browser.close();
    await dash?.close();
    await run.close();
  }
});
