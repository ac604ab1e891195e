// Public surface of the native kernels: the policy model the actors train and sample, the stand-alone layer
// kernels (tests, benchmarks), and what backend is in use.
import { resolveBackend, type DeviceRequest } from "./native.js";

export { PolicyModel } from "./policy-model.js";
export type { PackedMicroBatch, MicroStats, StepOptions, StepResult, TensorEntry, OptimizerState, CreateOptions, ParamRanges } from "./policy-model.js";
export type { GenerateRequest, GenerateResult, StopReason } from "./generate-request.js";
export { InferenceEngine, versionSpans } from "./engine.js";
export type { EngineOptions, EngineRequest, EngineStep, EngineToken, EngineFinish, EngineStats, VersionSpan } from "./engine.js";
export { lossSpecSchema, LOSS_DEFAULTS, toNativeLossSpec } from "./loss-spec.js";
export type { LossSpec, LossName } from "./loss-spec.js";
export { kernels } from "./layer-kernels.js";
export type { AttentionDims, SgemmArgs, GemmImpl, BlasMode } from "./layer-kernels.js";
export type { ModelConfig } from "./model-config.js";
export type { Device, DeviceRequest, KernelSettings, CudaMatmul } from "./native.js";
export { configureKernels, kernelSettings, DEFAULT_KERNEL_SETTINGS } from "./native.js";

export interface BackendInfo {
  device: string;
  /** The BLAS library loaded ("openblas (file) config, core SkylakeX (how the core was chosen)"), else "none (why)". */
  blas: string;
  /** CPU: "auto" (measured routing), "off" or "on" (OpenBLAS unmeasured); kernels/cpu/gemm_router.h. */
  blasMode?: string;
  /** CPU: how sgemm products are routed, machine-readable: "off", "on", or "nt:2048x256x128:2t=blas,tn:128x128x2048:2t=own,..."
   *  per shape class (transposes, M, N and K rounded down to powers of 2, threads). What the learner records and replay pins. */
  blasRoutes?: string;
  /** CPU: the routing in words, with the measured speed of OpenBLAS relative to our sgemm per class. */
  blasDispatch?: string;
  /** Default thread count of the stand-alone kernels (all cores). */
  threads: number;
  simd: string;
  /** CUDA: how the model's matmuls run (fp32, tf32, bf16). */
  matmul?: string;
  abi?: number;
  /** Why this backend was chosen. */
  reason: string;
  path: string;
}

/** The backend a model created with this device request would use. */
export function backendInfo(device: DeviceRequest = "auto"): BackendInfo {
  const r = resolveBackend(device);
  const info = parseBackendInfo(r.backend.info());
  return { ...info, reason: r.reason, path: r.backend.path() };
}

/** rs_backend_info's JSON (kernels.h) with the fields renamed as in BackendInfo. */
export function parseBackendInfo(json: string): Omit<BackendInfo, "reason" | "path"> {
  const i = JSON.parse(json) as {
    device: string;
    blas: string;
    blas_mode?: string;
    blas_routes?: string;
    blas_dispatch?: string;
    threads: number;
    simd: string;
    matmul?: string;
    abi?: number;
  };
  return {
    device: i.device,
    blas: i.blas,
    blasMode: i.blas_mode,
    blasRoutes: i.blas_routes,
    blasDispatch: i.blas_dispatch,
    threads: i.threads,
    simd: i.simd,
    matmul: i.matmul,
    abi: i.abi,
  };
}

/**
 * Whether any sgemm product went (or, for "on", would go) to a BLAS library, from the info fields: on the CPU the
 * routes decide (a run whose every class measured faster on our sgemm has our bits); on CUDA, cuBLAS when loaded.
 */
export function blasInUse(info: { blas: string; blasRoutes?: string }): boolean {
  if (info.blas.startsWith("none")) return false;
  if (info.blasRoutes === undefined) return true;
  return info.blasRoutes === "on" || /=blas\b/.test(info.blasRoutes);
}
