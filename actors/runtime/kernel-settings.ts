// The kernel settings a rollstream process runs with, from the documented knobs (README, kernels/NOTES.md,
// kernels/cuda/README.md). This is the one place they are read: the CLI applies them at start (cli/main.ts), and
// from there they reach the C libraries as arguments (configureKernels -> rs_set_settings), never as environment
// variables the libraries read. A value the knob does not accept is an error naming it, not a silent default.
import { DEFAULT_KERNEL_SETTINGS, type KernelSettings } from "../../kernels/native.js";

/** What each knob takes, and the setting each value means. */
const TAKES = {
  ROLLSTREAM_BLAS: { auto: "auto", off: "off", on: "on", none: "off", force: "on", "0": "off", "1": "on" },
  ROLLSTREAM_SIMD: { best: "best", avx512: "best", avx2: "avx2" },
  ROLLSTREAM_CUDA_MATMUL: { fp32: "fp32", tf32: "tf32", bf16: "bf16" },
  ROLLSTREAM_CUDA_SYNC: { "0": false, "1": true },
} as const satisfies Record<string, Record<string, unknown>>;

function choice<K extends keyof typeof TAKES, D>(env: NodeJS.ProcessEnv, name: K, fallback: D): (typeof TAKES)[K][keyof (typeof TAKES)[K]] | D {
  const v = env[name];
  if (v === undefined || v === "") return fallback;
  if (!Object.hasOwn(TAKES[name], v)) throw new Error(`${name}=${v} is not a value it takes: ${Object.keys(TAKES[name]).join(", ")} (or unset)`);
  return TAKES[name][v as keyof (typeof TAKES)[K]];
}

/**
 * ROLLSTREAM_BLAS=auto|off|on (off: OpenBLAS / cuBLAS never loaded; on: the CPU's unmeasured rule),
 * ROLLSTREAM_BLAS_LIB=<OpenBLAS file>, ROLLSTREAM_SIMD=avx2 (our sgemm without AVX-512),
 * ROLLSTREAM_CUDA_MATMUL=fp32|tf32|bf16, ROLLSTREAM_CUDA_SYNC=1 (a fault names its kernel),
 * ROLLSTREAM_CUBLAS=<libcublas file>. Unset knobs keep the libraries' defaults.
 */
export function kernelSettingsFromEnv(env: NodeJS.ProcessEnv = process.env): KernelSettings {
  const d = DEFAULT_KERNEL_SETTINGS;
  return {
    blasMode: choice(env, "ROLLSTREAM_BLAS", d.blasMode),
    blasLib: env["ROLLSTREAM_BLAS_LIB"] ?? d.blasLib,
    blasRoutes: d.blasRoutes, // pinned by replay and a restarted learner from what the run recorded, never by hand
    simd: choice(env, "ROLLSTREAM_SIMD", d.simd),
    cudaMatmul: choice(env, "ROLLSTREAM_CUDA_MATMUL", d.cudaMatmul),
    cudaSync: choice(env, "ROLLSTREAM_CUDA_SYNC", d.cudaSync),
    cublasLib: env["ROLLSTREAM_CUBLAS"] ?? d.cublasLib,
  };
}
