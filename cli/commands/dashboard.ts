// `rollstream dashboard --run R`: the web page over one run (cli/dashboard). Live runs are read from their
// server; a finished run's stored streams are served for it, as replay and inspect do. Read-only, and bound
// to 127.0.0.1 unless --host says otherwise.
import { existsSync } from "node:fs";
import { join } from "node:path";
import type { Command } from "commander";
import { loadRunConfig, type RunConfig } from "../../actors/runtime/config.js";
import { connectNats } from "../../actors/runtime/nats-connect.js";
import { natsForRun } from "../run-nats.js";
import { startDashboard } from "../dashboard/server.js";

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
      process.exitCode = await dashboard(opts);
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
  const served = await natsForRun(join(outDir, run), configUrl, opts.nats);
  try {
    const nc = await connectNats(served.url, "rollstream-dashboard");
    const d = await startDashboard({ nc, run, host: opts.host, port, config });
    process.stdout.write(`dashboard of run ${run}: ${d.url} (Ctrl-C stops it)\n`);
    await new Promise<void>((resolve) => {
      process.once("SIGINT", resolve);
      process.once("SIGTERM", resolve);
    });
    await d.close();
    await nc.close();
    return 0;
  } catch (e) {
    process.stderr.write(`dashboard: ${(e as Error).message.split("\n")[0]}\n`);
    return 1;
  } finally {
    await served.stop();
  }
}
