// Where a run checkpoint's run config is: runs/<run>/checkpoints/step-N (with its manifest.json) keeps it
// two levels up, as runs/<run>/config.yaml. Shared by the model-folder loader and `eval` (which reads the
// run's environment args from it) without loading any model code.
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

export function isRunCheckpoint(path: string): boolean {
  return existsSync(join(resolve(path), "manifest.json"));
}

export function runConfigPathOf(checkpoint: string): string {
  return join(dirname(dirname(resolve(checkpoint))), "config.yaml");
}
