// `rollstream dashboard --run R`: the web page over one run (cli/dashboard). Live runs are read from their
// server; a finished run's stored streams are served for it, as replay and inspect do. Read-only, and bound
// to 127.0.0.1 unless --host says otherwise. A taken port or a run the server does not have is one line and
// a non-zero exit; Ctrl-C stops it within a couple of seconds, also once the run's server is gone.
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import type { Command } from "commander";
import { loadRunConfig, type RunConfig } from "../../actors/runtime/config.js";
import { connectNats } from "../../actors/runtime/nats-connect.js";
import { natsForRun } from "../run-nats.js";
import { runMissing } from "../run-exists.js";
import { PortInUseError, startDashboard } from "../dashboard/server.js";

/** How long Ctrl-C waits for a clean stop (a connection to a server that is gone is not waited for). */
const STOP_MS = 1_500;

interface DashboardOptions {
  run?: string;
  config?: string;
  nats?: string;
  outDir?: string;
  host?: string;
  port?: string;
}

export function registerDashboardCommand(program: Command): void {
  program
    .command("dashboard")
    .description("serve a read-only web page over a run's streams: charts, rollouts, eval, dead letters, health")
    .option("--run <run>", "run name")
    .option("-c, --config <file>", "take the run name, NATS URL and tokenizer from a run config")
    .option("--nats <url>", "NATS server (default: NATS_URL; a live train's server; else the run's stored streams)")
    .option("--out-dir <dir>", "where run folders live", "runs")
    .option("--host <host>", "address to bind", "127.0.0.1")
    .option("--port <port>", "port (0: any free one)", "8765")
    .action(async (opts: DashboardOptions) => {
      // A stopped dashboard has nothing left to do: a client still retrying a server that is gone must not keep it up.
      process.exit(await dashboard(opts));
    });
}

async function dashboard(opts: DashboardOptions): Promise<number> {
  let run = opts.run;
  let configUrl: string | undefined;
  let outDir = opts.outDir ?? "runs";
  let config: RunConfig | undefined;
  try {
    if (opts.config) {
      config = loadRunConfig(opts.config);
      run ??= config.run;
      configUrl = config.nats.url;
      outDir = config.outDir;
    } else if (run && existsSync(join(outDir, run, "config.yaml"))) {
      // train keeps the run's config with it: the token view can decode text and recompute the learner's logprobs.
      config = loadRunConfig(join(outDir, run, "config.yaml"));
    }
  } catch (e) {
    process.stderr.write(`${(e as Error).message.split("\n")[0]}\n`);
    return 2;
  }
  if (!run) {
    process.stderr.write("dashboard needs --run or --config\n");
    return 2;
  }
  const port = Number(opts.port ?? 8765);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`--port must be 0..65535 (got ${opts.port})\n`);
    return 2;
  }
  const host = opts.host ?? "127.0.0.1";
  if (port !== 0 && !(await portFree(host, port))) {
    process.stderr.write(`dashboard: ${new PortInUseError(host, port).message}\n`);
    return 1;
  }
  const served = await natsForRun(join(outDir, run), configUrl, opts.nats);
  let nc: Awaited<ReturnType<typeof connectNats>> | null = null;
  try {
    nc = await connectNats(served.url, "rollstream-dashboard");
    const missing = await runMissing(nc, run, served.url);
    if (missing) {
      process.stderr.write(`dashboard: ${missing}\n`);
      return 2;
    }
    const d = await startDashboard({ nc, run, host, port, config });
    process.stdout.write(`dashboard of run ${run}: ${d.url} (Ctrl-C stops it)\n`);
    await new Promise<void>((resolve) => {
      process.once("SIGINT", resolve);
      process.once("SIGTERM", resolve);
    });
    // A second Ctrl-C while stopping ends it at once.
    process.once("SIGINT", () => process.exit(130));
    await within(d.close(), STOP_MS);
    return 0;
  } catch (e) {
    process.stderr.write(`dashboard: ${(e as Error).message.split("\n")[0]}\n`);
    return 1;
  } finally {
    if (nc) await within(nc.close(), 500);
    await within(served.stop(), STOP_MS);
  }
}

/** Whether `port` can be bound on `host` now (checked before anything starts, so a taken one is one line). */
function portFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once("error", () => resolve(false));
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve(true)));
  });
}

/** Waits for `p` at most `ms` (what is left is ended by the process's exit). */
function within(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.then(
      () => undefined,
      () => undefined,
    ),
    new Promise<void>((r) => (timer = setTimeout(r, ms))),
  ]).finally(() => clearTimeout(timer));
}
