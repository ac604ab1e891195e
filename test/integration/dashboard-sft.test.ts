// The SFT stage on the dashboard, in chromium over a real run with one: while the learner is in it (held
// there with SIGSTOP right after its first SFT step, so the page is looked at during the stage, not after),
// the header names the phase and the SFT step, with no "status ?" and no "policy v-1" (there is no run status
// and no policy version yet); the SFT loss is charted from the learner's "sft" metrics events, and once the
// run is done the chart equals those events point for point.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Page } from "playwright-core";
import { launchChromium } from "../helpers/chromium.js";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { decodeMsgpack, MetricsEventSchema, StateKeys } from "../../streams/index.js";
import { startDashboard } from "../../cli/dashboard/server.js";
import { testSampling } from "../helpers/rollout-fixtures.js";

const SFT_STEPS = 30;

const series = (page: Page, name: string) =>
  page.evaluate((n) => (window as unknown as { __series: Record<string, [number[], number[]]> }).__series[n], name) as Promise<
    [number[], number[]] | undefined
  >;

test("the dashboard shows the SFT stage: its phase and step in the header, its loss charted from the learner's sft events", async () => {
  const run = await startRun("dashsft", {
    sft: { steps: SFT_STEPS, batchSize: 8 },
    rl: { steps: 2, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling },
  });
  const browser = await launchChromium(["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]);
  let dash: Awaited<ReturnType<typeof startDashboard>> | null = null;
  let stopped: number | undefined;
  try {
    const subject = run.topology.names.subjects.metrics("learner");
    // The learner is stopped the moment its first SFT step is published (a core subscription sees it at once).
    const sub = run.nc.subscribe(subject, {
      max: 1,
      callback: () => {
        stopped = run.launcher.pid("learner");
        if (stopped) process.kill(stopped, "SIGSTOP");
      },
    });
    for (const name of ["checkpoint", "learner", "orchestrator", "inference", "reward"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("the learner's first SFT step", () => stopped !== undefined, 90_000, `${run.dir}/logs`);
    sub.unsubscribe();
    assert.equal(await run.state.get(StateKeys.runPhase), "sft");
    assert.equal(await run.state.get(StateKeys.policyVersion), undefined, "no policy version during SFT");

    dash = await startDashboard({ nc: run.nc, run: "dashsft", pushMs: 500 });
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await page.goto(dash.url);
    await page.waitForSelector("body[data-loaded='1']", { timeout: 20_000 });
    await page.waitForSelector("#overview #sft", { timeout: 10_000 });
    const header = (await page.textContent("#overview")) ?? "";
    assert.match(header, /phase sft/);
    assert.match(header, new RegExp(`SFT step \\d+ / ${SFT_STEPS} · loss \\d`));
    assert.match(header, /no policy published yet/);
    assert.doesNotMatch(header, /v-1|\?|status/, header);
    const during = (await series(page, "sftLoss"))!;
    assert.ok(during && during[0].length >= 1, "the SFT loss is charted during the stage");

    process.kill(stopped!, "SIGCONT");
    stopped = undefined;
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 120_000, `${run.dir}/logs`);
    const events = (await storedMessages(run.topology.jsm, run.topology.names.streams.events, subject))
      .map((m) => decodeMsgpack(MetricsEventSchema, m.data))
      .filter((e) => e.kind === "sft");
    assert.equal(events.length, SFT_STEPS);
    await waitUntil("the whole SFT stage charted", async () => (await series(page, "sftLoss"))?.[0].length === SFT_STEPS, 20_000);
    const sft = (await series(page, "sftLoss"))!;
    assert.deepEqual(
      sft[0],
      events.map((e) => e.values["sftStep"]),
    );
    assert.deepEqual(
      sft[1],
      events.map((e) => e.values["loss"]),
    );
    assert.ok(new Set(sft[1]).size > 1, "the SFT loss moves (the chart is not one repeated value)");
    await page.waitForFunction(() => document.querySelector("#overview")?.textContent?.includes("status done"), null, { timeout: 10_000 });
    const after = (await page.textContent("#overview")) ?? "";
    assert.match(after, /phase rl/);
    assert.match(after, /policy v\d+/);
  } finally {
    if (stopped) process.kill(stopped, "SIGCONT");
    await browser.close();
    await dash?.close();
    await run.close();
  }
});
