// Preloaded (`node --import`, see kernel-test-hooks.ts) into a process a test starts: sets the kernel test hooks the
// test asked for before the process's own code runs.
import { setKernelTestHooks } from "../../kernels/testing.js";
import { HOOKS_VAR } from "./kernel-test-hooks.js";

const hooks = process.env[HOOKS_VAR];
if (hooks) setKernelTestHooks(JSON.parse(hooks));
