// Public surface of the native kernels: the policy model the actors train and sample, the stand-alone layer
// kernels (tests, benchmarks), and what backend is in use.
import { resolveBackend, type DeviceRequest } from "./native.js";

export { PolicyModel } from "./policy-model.js";
export type { PackedMicroBatch, MicroStats, StepOptions, StepResult, TensorEntry, OptimizerState, CreateOptions } from "./policy-model.js";
export type { GenerateRequest, GenerateResult, StopReason } from "./generate-request.js";
export { lossSpecSchema, LOSS_DEFAULTS, toNativeLossSpec } from "./loss-spec.js";
export type { LossSpec, LossName } from "./loss-spec.js";
export { kernels } from "./layer-kernels.js";
export type { AttentionDims, SgemmArgs, GemmImpl } from "./layer-kernels.js";
export type { ModelConfig } from "./model-config.js";
export type { Device, DeviceRequest } from "./native.js";

export interface BackendInfo {
  device: string;
  /** "openblas (...)" when sgemm dispatches to OpenBLAS, else "none (why)". */
  blas: string;
  /** Default thread count of the stand-alone kernels (all cores). */
  threads: number;
  simd: string;
  /** Why this backend was chosen. */
  reason: string;
  path: string;
}

/** The backend a model created with this device request would use. */
export function backendInfo(device: DeviceRequest = "auto"): BackendInfo {
  const r = resolveBackend(device);
  const info = JSON.parse(r.backend.info()) as { device: string; blas: string; threads: number; simd: string };
  return { device: info.device, blas: info.blas, threads: info.threads, simd: info.simd, reason: r.reason, path: r.backend.path() };
}
