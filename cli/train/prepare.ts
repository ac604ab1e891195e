// `train`'s first step, the config: checked in one pass (as `config check` does) and its environments loaded,
// so that nothing starts on a run with any problem. Once train owns the run (owner.ts), claimRunFolder empties
// the run's folder (--fresh) and copies the config into it, where `replay --run` and `doctor` find it: a
// second train, refused, leaves the running one's folder alone.
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import type { RunConfig } from "../../actors/runtime/config.js";
import { checkConfigFile, describeCheck } from "../../actors/runtime/config-check.js";
import { closeRunEnvironments, loadRunEnvironments, type LoadedEnvironment } from "../../actors/runtime/environments.js";

export interface PreparedRun {
  configPath: string;
  config: RunConfig;
  /** Loaded before anything starts, for a bad environment spec to fail early and for actorPlan's needsSandbox. */
  envs: Map<string, LoadedEnvironment>;
  /** <outDir>/<run>: logs, checkpoints, metrics, the embedded server's store. */
  runDir: string;
}

/** What --fresh deletes from the run's folder, besides the logs (the streams and buckets go with deleteTopology). */
const FRESH_DELETES = ["checkpoints", "metrics.jsonl", "steps.jsonl", "eval.json"];
/** The embedded server's log in logs/ (server.ts), written by a server that is running when the folder is claimed. */
export const SERVER_LOG = "nats-server.log";

/** The checked config, its environments and its folder; or exit code 2, the problems said, when any is bad. */
export async function prepareRun(configPath: string): Promise<PreparedRun | number> {
  const checked = await checkConfigFile(configPath);
  if (!checked.config) {
    process.stderr.write(`${describeCheck(configPath, checked)}\n`);
    return 2;
  }
  const config: RunConfig = checked.config;
  let envs: Map<string, LoadedEnvironment>;
  try {
    envs = await loadRunEnvironments(config);
    // train reads what the environments are (names, versions, sandbox needs), never rolls out: a remote one's
    // connection to its server is let go at once (it would keep this process alive).
    await closeRunEnvironments(envs.values());
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n`);
    return 2;
  }
  const runDir = resolve(config.outDir, config.run);
  mkdirSync(join(runDir, "logs"), { recursive: true });
  return { configPath, config, envs, runDir };
}

/** The folder of a run train now owns: emptied first with --fresh (the log of a server train started stays), the config copied in. */
export function claimRunFolder(run: PreparedRun, fresh: boolean): void {
  const { runDir } = run;
  if (fresh) {
    for (const p of FRESH_DELETES) rmSync(join(runDir, p), { recursive: true, force: true });
    for (const f of readdirSync(join(runDir, "logs"))) if (f !== SERVER_LOG) rmSync(join(runDir, "logs", f), { recursive: true, force: true });
  }
  copyFileSync(run.configPath, join(runDir, "config.yaml"));
}
