// `train`'s first step, the config: checked in one pass (as `config check` does) and its environments loaded,
// so that nothing starts on a run with any problem; then the run's folder made ready (emptied first with
// --fresh) and the config copied into it, where `replay --run` and `doctor` find it.
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import type { RunConfig } from "../../actors/runtime/config.js";
import { checkConfigFile } from "../../actors/runtime/config-check.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../../actors/runtime/environments.js";

export interface PreparedRun {
  configPath: string;
  config: RunConfig;
  /** Loaded before anything starts, for a bad environment spec to fail early and for actorPlan's needsSandbox. */
  envs: Map<string, LoadedEnvironment>;
  /** <outDir>/<run>: logs, checkpoints, metrics, the embedded server's store. */
  runDir: string;
}

/** What --fresh deletes from the run's folder (the streams and buckets go with deleteTopology). */
const FRESH_DELETES = ["checkpoints", "metrics.jsonl", "steps.jsonl", "logs", "eval.json"];

/** The checked config, its environments and its ready folder; or exit code 2, the problems said, when any is bad. */
export async function prepareRun(configPath: string, fresh: boolean): Promise<PreparedRun | number> {
  const checked = await checkConfigFile(configPath);
  if (!checked.config) {
    process.stderr.write(`invalid config ${configPath}:\n${checked.problems.map((p) => `  - ${p}`).join("\n")}\n`);
    return 2;
  }
  const config: RunConfig = checked.config;
  let envs: Map<string, LoadedEnvironment>;
  try {
    envs = await loadRunEnvironments(config);
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n`);
    return 2;
  }
  const runDir = resolve(config.outDir, config.run);
  if (fresh) for (const p of FRESH_DELETES) rmSync(join(runDir, p), { recursive: true, force: true });
  mkdirSync(join(runDir, "logs"), { recursive: true });
  copyFileSync(configPath, join(runDir, "config.yaml"));
  return { configPath, config, envs, runDir };
}
