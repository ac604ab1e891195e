// Kernel test hooks (kernels/testing.ts) for a rollstream process a test starts (an actor, the CLI): the hooks
// travel in a test-only variable and a preload (kernel-test-hooks-preload.ts, `node --import`) sets them through the
// test-only ABI call when that process starts. Production code never reads the variable.
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { KernelTestHooks } from "../../kernels/testing.js";

export const HOOKS_VAR = "ROLLSTREAM_TEST_KERNEL_HOOKS";

/** Environment entries that give a started process (and the node processes it starts) these hooks. */
export function testHooksEnv(hooks: KernelTestHooks): Record<string, string> {
  const preload = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), "kernel-test-hooks-preload.js")).href;
  return { [HOOKS_VAR]: JSON.stringify(hooks), NODE_OPTIONS: `${process.env["NODE_OPTIONS"] ?? ""} --import=${preload}`.trim() };
}
