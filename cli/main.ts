// The `rollstream` command.
import "reflect-metadata";
import { Command } from "commander";
import { registerTrainCommand } from "./commands/train.js";
import { registerActorCommand } from "./commands/actor.js";
import { registerInspectCommand } from "./commands/inspect.js";
import { registerBenchCommand } from "./commands/bench.js";
import { registerConfigCommand } from "./commands/config.js";
import { registerDoctorCommand } from "./commands/doctor.js";
import { debugEnabled, reportError } from "./errors.js";
import { configureKernels } from "../kernels/native.js";
import { kernelSettingsFromEnv } from "../actors/runtime/kernel-settings.js";

// Anything thrown past a command's own handling ends the same way: one line, a hint, exit code.
for (const event of ["uncaughtException", "unhandledRejection"] as const) {
  process.on(event, (e: unknown) => {
    process.exitCode = reportError(e);
    process.exit();
  });
}

// The kernels' knobs, read once here and passed to the libraries as arguments (before any backend is opened).
configureKernels(kernelSettingsFromEnv());

const program = new Command();
program
  .name("rollstream")
  .description("asynchronous RL post-training for language models over NATS JetStream")
  .version("0.1.0")
  .option("--debug", "print stack traces of errors (also ROLLSTREAM_DEBUG=1)")
  // Commander's own usage errors throw (after printing their line) instead of exiting, so they exit 2 here.
  .exitOverride();
registerTrainCommand(program);
registerActorCommand(program);
registerInspectCommand(program);
registerBenchCommand(program);
registerConfigCommand(program);
registerDoctorCommand(program);

// Commands contributed by the sandbox and environments modules load lazily so that a missing optional
// piece never breaks the core commands.
const optional: Array<[string, (p: Command) => Promise<void>]> = [
  ["sandbox", async (p) => (await import("./commands/sandbox.js")).registerSandboxCommands(p)],
  ["env", async (p) => (await import("./commands/env.js")).registerEnvCommands(p)],
  ["eval", async (p) => (await import("./commands/eval-wiring.js")).registerEval(p)],
  ["replay", async (p) => (await import("./commands/replay.js")).registerReplayCommand(p)],
  ["dashboard", async (p) => (await import("./commands/dashboard.js")).registerDashboardCommand(p)],
  ["serve", async (p) => (await import("./commands/serve.js")).registerServeCommand(p)],
];
for (const [, register] of optional) {
  try {
    await register(program);
  } catch (e) {
    if (debugEnabled()) process.stderr.write(`optional command failed to load: ${(e as Error).message}\n`);
  }
}
try {
  await program.parseAsync(process.argv);
} catch (e) {
  // Nothing is left to do after a failed command: exit now (open connections would keep the process up),
  // and the servers and actors it started go with it (deploy/local/child-reaper.ts).
  process.exit(reportError(e));
}
