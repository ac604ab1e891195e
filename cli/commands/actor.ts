// `rollstream actor <name> --config run.yaml`: runs one actor alone as this process (how the train
// command launches them, and how deploy/k8s and deploy/slurm run them).
import type { Command } from "commander";
import { runActorProcess } from "../../actors/runtime/lifecycle.js";
import { ACTORS } from "../../actors/registry.js";
import { loadRunConfig, parseRunConfig, type RunConfig } from "../../actors/runtime/config.js";
import { runLearnerRankRole } from "../../actors/runtime/learner-ranks.js";
import { UsageError } from "../errors.js";

/** A sandbox with no run: default sandbox settings; its heartbeat and metrics live under run `run`. */
function standaloneSandboxConfig(run: string): RunConfig {
  return parseRunConfig({ run, environments: [{ id: "code@^1" }] }, "(sandbox without a run config)");
}

/** A config that does not load is left for runActorProcess to report, as for every actor. */
async function learnerRankRole(configPath: string): Promise<number | null> {
  let config: RunConfig;
  try {
    config = loadRunConfig(configPath);
  } catch {
    return null;
  }
  return runLearnerRankRole(config);
}

export function registerActorCommand(program: Command): void {
  program
    .command("actor <name>")
    .description(`run one actor in this process: ${Object.keys(ACTORS).join(", ")}`)
    .option("-c, --config <file>", "run config (YAML); the sandbox actor needs none (it serves every run)")
    .option("--run <run>", "sandbox without -c: the run name its heartbeat and metrics go under", "sandbox")
    .option("--nats <url>", "NATS server (default: NATS_URL, then the config, then nats://127.0.0.1:4222)")
    .option("--instance <id>", "replica name used in logs and metrics")
    .option("--metrics-port <port>", "serve Prometheus /metrics on this port")
    .action(async (name: string, opts: { config?: string; run: string; nats?: string; instance?: string; metricsPort?: string }) => {
      const load = ACTORS[name];
      if (!load) throw new UsageError(`unknown actor ${JSON.stringify(name)}; choose one of ${Object.keys(ACTORS).join(", ")}`);
      if (!opts.config && name !== "sandbox") throw new UsageError(`actor ${name} needs the run config: -c <file>`);
      // actors.learner.ranks > 1: this process launches the ranks (mpirun), or is a rank that follows rank 0.
      const ranked = name === "learner" && opts.config ? await learnerRankRole(opts.config) : null;
      if (ranked !== null) {
        process.exitCode = ranked;
        setTimeout(() => process.exit(process.exitCode ?? 0), 200).unref();
        return;
      }
      const cls = await load();
      process.exitCode = await runActorProcess(name, cls, {
        configPath: opts.config ?? standaloneSandboxConfig(opts.run),
        natsUrl: opts.nats,
        instance: opts.instance,
        metricsPort: opts.metricsPort ? Number(opts.metricsPort) : undefined,
      });
      // Native thread pools and timers must not keep a finished actor alive.
      setTimeout(() => process.exit(process.exitCode ?? 0), 200).unref();
    });
}
