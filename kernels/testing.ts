// TEST ONLY: the kernels' test hooks (rs_set_test_hooks in kernels.h), the positive controls of the CPU sgemm
// dispatcher: pretend OpenBLAS detected another core, slow one kernel down in the dispatcher's timing, or corrupt
// OpenBLAS's result before the agreement check. Production code never imports this file (test/kernels/
// kernel-settings.test.ts checks); the hooks are not part of KernelSettings and never come from a run's config.
import { resolveBackend, type Device, type NativeTestHooks } from "./native.js";

export type KernelTestHooks = Partial<NativeTestHooks>;

export const NO_TEST_HOOKS: Readonly<NativeTestHooks> = Object.freeze({ blasDetectedCore: "", slowdownOwn: 1, slowdownBlas: 1, corruptBlas: false });

/**
 * Replaces the hooks of `device`'s backend (fields left out: no hook) and forgets the dispatcher's measured routes,
 * so the next product of each class is measured under them. blasDetectedCore acts only on BLAS's first load.
 */
export function setKernelTestHooks(hooks: KernelTestHooks, device: Device = "cpu"): void {
  resolveBackend(device).backend.setTestHooks({ ...NO_TEST_HOOKS, ...hooks });
}
