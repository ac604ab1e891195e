// `rollstream actor <name> --config run.yaml`: runs one actor alone as this process (how the train
// command launches them, and how deploy/k8s and deploy/slurm run them).
import type { Command } from "commander";
import { runActorProcess } from "../../actors/runtime/lifecycle.js";
import { ACTORS } from "../../actors/registry.js";

export function registerActorCommand(program: Command): void {
  program
    .command("actor <name>")
    .description(`run one actor in this process: ${Object.keys(ACTORS).join(", ")}`)
    .requiredOption("-c, --config <file>", "run config (YAML)")
    .option("--nats <url>", "NATS server (default: NATS_URL, then the config, then nats://127.0.0.1:4222)")
    .option("--instance <id>", "replica name used in logs and metrics")
    .option("--metrics-port <port>", "serve Prometheus /metrics on this port")
    .action(async (name: string, opts: { config: string; nats?: string; instance?: string; metricsPort?: string }) => {
      const load = ACTORS[name];
      if (!load) {
        process.stderr.write(`unknown actor ${JSON.stringify(name)}; choose one of ${Object.keys(ACTORS).join(", ")}\n`);
        process.exitCode = 2;
        return;
      }
      const cls = await load();
      process.exitCode = await runActorProcess(name, cls, {
        configPath: opts.config,
        natsUrl: opts.nats,
        instance: opts.instance,
        metricsPort: opts.metricsPort ? Number(opts.metricsPort) : undefined,
      });
      // Native thread pools and timers must not keep a finished actor alive.
      setTimeout(() => process.exit(process.exitCode ?? 0), 200).unref();
    });
}
