// The dashboard over a long run: how long its first page takes with N scored rows in the run's streams
// (issue 13: 10,000 rows under 2 s), against the baseline of reading the same subject's headers with one
// plain ordered consumer (the least any reader of the stream pays). Measured twice: the HTTP calls the page
// makes (overview + first page of groups + learner metrics) and, where chromium is installed, the page
// itself in headless chromium until its charts and first rollout page are drawn.
//
//   rollstream bench dashboard [--quick]      (ROWS=100000 to try a longer run)
//
// Last line printed: one JSON object of the figures.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import { startNatsServer } from "../deploy/local/nats-server.js";
import { ensureTopology, openWire, RunChannels, stepRecordOf } from "../streams/index.js";
import { startDashboard } from "../cli/dashboard/server.js";
import { syntheticRolloutRows } from "./transport.js";

const CHROMIUM = process.env["ROLLSTREAM_CHROMIUM"] ?? "/usr/bin/chromium";
const GROUP = 8;

export async function runDashboardBench(opts: { quick?: boolean; log?: (l: string) => void }): Promise<Record<string, number>> {
  const log = opts.log ?? ((l: string) => console.log(l));
  const rows = Number(process.env["ROWS"] ?? (opts.quick ? 2_000 : 10_000));
  const steps = Math.ceil(rows / 64);
  const dir = mkdtempSync(join(tmpdir(), "rs-bench-dash-"));
  const server = await startNatsServer({ storeDir: join(dir, "nats") });
  const nc = await connect({ servers: server.url });
  try {
    const run = "benchdash";
    await ensureTopology(nc, run);
    const wire = openWire(nc, run);
    const channels = new RunChannels(wire);
    // A run's worth of scored groups (8 rows of 64 + 192 tokens each) and one learner step record per 64 rows.
    const t0 = performance.now();
    const groups = Math.ceil(rows / GROUP);
    const pending: Promise<unknown>[] = [];
    for (let g = 0; g < groups; g++) {
      const batch = syntheticRolloutRows(GROUP, 64, 192, g + 1).map((r) => ({
        ...r,
        step: Math.floor((g * GROUP) / 64),
        reward: (g + r.exampleIndex) % 3 === 0 ? 1 : 0,
      }));
      pending.push(channels.scored.publish(batch, { batchId: `g${g}`, step: batch[0]!.step, env: "gsm8k@1", producer: "bench" }));
      if (pending.length >= 64) await Promise.all(pending.splice(0));
    }
    for (let s = 1; s <= steps; s++) {
      pending.push(channels.steps.publish(stepRecordOf(wire.run, s, steps, { loss: 1 / s, gradNorm: 0.5, entropy: 2 })));
      if (pending.length >= 64) await Promise.all(pending.splice(0));
    }
    await Promise.all(pending);
    log(`stored ${rows} scored rows in ${groups} groups and ${steps} learner steps (${((performance.now() - t0) / 1000).toFixed(1)} s)`);

    // Baseline: one ordered consumer reading every scored message's headers, as `nats stream view` would.
    const baseStart = performance.now();
    const consumer = await jetstream(nc).consumers.get(wire.names.streams.rollouts, {
      filter_subjects: wire.names.subjects.rolloutsScored,
      deliver_policy: DeliverPolicy.All,
      headers_only: true,
    });
    let seen = 0;
    const iter = await consumer.consume({ max_messages: 256 });
    for await (const m of iter) {
      seen++;
      if (m.info.pending === 0) break;
    }
    await iter.close();
    const baselineMs = performance.now() - baseStart;
    log(`baseline: headers of ${seen} messages through one ordered consumer: ${baselineMs.toFixed(0)} ms`);

    // The HTTP calls of the first page, on a fresh dashboard (nothing read yet).
    let dash = await startDashboard({ nc, run, port: 0 });
    const httpStart = performance.now();
    const get = async (path: string) => {
      const r = await fetch(`${dash.url}${path}`);
      if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
      return r.json();
    };
    await Promise.all([get("/api/overview"), get("/api/groups?limit=100"), get("/api/metrics/learner")]);
    const httpMs = performance.now() - httpStart;
    const warmStart = performance.now();
    await Promise.all([get("/api/overview"), get("/api/groups?limit=100&offset=5000"), get("/api/metrics/learner")]);
    const warmMs = performance.now() - warmStart;
    await dash.close();
    log(
      `first page over HTTP (cold dashboard): ${httpMs.toFixed(0)} ms (${(httpMs / baselineMs).toFixed(2)}x the baseline); a later page: ${warmMs.toFixed(0)} ms`,
    );

    let browserMs = Number.NaN;
    if (existsSync(CHROMIUM)) {
      const { chromium } = await import("playwright-core");
      const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--no-first-run"] });
      dash = await startDashboard({ nc, run, port: 0 });
      try {
        const page = await browser.newPage();
        const start = performance.now();
        await page.goto(dash.url);
        await page.waitForSelector("body[data-loaded='1']", { timeout: 60_000 });
        await page.waitForSelector("#groups tbody tr", { state: "attached", timeout: 60_000 });
        browserMs = performance.now() - start;
      } finally {
        await browser.close();
        await dash.close();
      }
      log(
        `first page in chromium (cold dashboard, charts and 100 groups drawn): ${browserMs.toFixed(0)} ms (${(browserMs / baselineMs).toFixed(2)}x the baseline)`,
      );
    } else log(`chromium not found at ${CHROMIUM}: the page itself not measured`);
    const figures = {
      rows,
      groups,
      baselineMs: Math.round(baselineMs),
      httpFirstPageMs: Math.round(httpMs),
      laterPageMs: Math.round(warmMs),
      browserFirstPageMs: Math.round(browserMs),
      httpVsBaseline: Number((httpMs / baselineMs).toFixed(2)),
    };
    console.log(JSON.stringify(figures));
    return figures;
  } finally {
    await nc.close();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
