// Loads the N-API addon and the kernels backend it drives. The addon (rollstream_kernels.node) holds no math:
// it dlopen()s a backend shared library that implements the C ABI in kernels.h, librollstream_cpu.so now and
// librollstream_cuda.so when that is built, and this file picks which one (device auto | cpu | cuda). Settings reach
// the libraries as arguments (configureKernels -> rs_set_settings), never through the environment: whoever starts
// the process decides them (the rollstream CLI reads its documented knobs in actors/runtime/kernel-settings.ts).
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ModelConfig } from "./model-config.js";

export type Device = "cpu" | "cuda";
export type DeviceRequest = "auto" | Device;

/** rs_settings.blas_mode: "auto" measured routing per shape class (CPU) / cuBLAS when it loads (CUDA), "off" never
 *  (never even loaded when set before BLAS's first use), "on" (CPU) every product of at least 2^19 multiply-adds to
 *  OpenBLAS, unmeasured. */
export type BlasMode = "auto" | "off" | "on";
/** rs_settings.cuda_matmul: how a CUDA model created afterwards runs its matmuls; "default" = bf16 when cuBLAS loads,
 *  else exact fp32. */
export type CudaMatmul = "default" | "fp32" | "tf32" | "bf16";

/** How the kernels run: rs_settings in kernels.h, field by field. One value for both backends (each ignores the
 *  other's fields). */
export interface KernelSettings {
  blasMode: BlasMode;
  /** CPU: the OpenBLAS file to load instead of the usual names ("" = those); fixed at BLAS's first use. */
  blasLib: string;
  /** CPU, auto mode: routes pinned instead of measured, as BackendInfo.blasRoutes writes them ("" = measure all). */
  blasRoutes: string;
  /** CPU: our sgemm's micro-kernel, the best the CPU has or AVX2 only (identical bits). */
  simd: "best" | "avx2";
  cudaMatmul: CudaMatmul;
  /** CUDA: synchronise after every kernel launch so a fault names its kernel. */
  cudaSync: boolean;
  /** CUDA: the libcublas file to load first ("" = the loader path's names); fixed at cuBLAS's first use. */
  cublasLib: string;
}

/** What a library nobody configured runs with (rs_settings all zero). */
export const DEFAULT_KERNEL_SETTINGS: Readonly<KernelSettings> = Object.freeze({
  blasMode: "auto",
  blasLib: "",
  blasRoutes: "",
  simd: "best",
  cudaMatmul: "default",
  cudaSync: false,
  cublasLib: "",
});

/** TEST ONLY (rs_test_hooks in kernels.h; set through kernels/testing.ts, never by production code). */
export interface NativeTestHooks {
  blasDetectedCore: string;
  slowdownOwn: number;
  slowdownBlas: number;
  corruptBlas: boolean;
}

/** Loss spec in the addon's flat form (see rs_loss_spec in kernels.h). */
export interface NativeLossSpec {
  kind: number;
  maskLow: number;
  maskHigh: number;
  clipEps: number;
  clipEpsHigh: number;
  klCoef: number;
  normalizer: number;
}

/** Sums over a micro-batch's loss tokens; loss is already divided by the normalizer. */
export interface NativeLossStats {
  loss: number;
  lossTokens: number;
  /** Loss tokens dropped by ratio masking (rl / ppo_clip). */
  maskedTokens: number;
  /** Entropy of the full softmax, summed over loss tokens. */
  entropySum: number;
  /** k3 = exp(d) - d - 1, d = logp - samplerLogp: an estimate of KL(sampler || learner), summed (0 for sft). */
  mismatchKlSum: number;
  logpSum: number;
  /** exp(logp - samplerLogp) summed (0 for sft). */
  ratioSum: number;
  /** Per predicted token (0 where lossMask is 0), when asked for. */
  tokenLogprobs?: Float32Array;
}

/** The model config as the addon takes it: the shape plus the thread count. */
/** moeLayers: moeLayerFlags(config), the per-layer flags the library reads (rs_model_config.moe_layers). */
export type NativeModelConfig = ModelConfig & { threads: number; moeLayers?: Uint8Array | null };

export interface NativeTensorInfo {
  name: string;
  offset: number;
  size: number;
  shape: number[];
  weightDecay: boolean;
}

export interface NativeGenerateConfig {
  maxNewTokens: number;
  temperature: number;
  topP: number;
  topK: number;
  seed: bigint;
  eos: Int32Array;
  stopFlat: Int32Array;
  stopOffsets: Int32Array;
  returnLogits: boolean;
  /** > 0: only ids below it can be drawn; 0 = the whole vocabulary. */
  vocabLimit: number;
}

export interface NativeGenerateOutput {
  tokens: Int32Array;
  logprobs: Float32Array;
  policyLogprobs: Float32Array;
  lengths: Int32Array;
  stopReasons: Int32Array;
  stepLogits?: Float32Array;
}

export interface NativeStepOptions {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  maxGradNorm: number;
}

export interface NativeStepResult {
  gradNorm: number;
  clipped: boolean;
  skipped: boolean;
  step: number;
}

/** Buffer kinds of NativeModel.read / write. */
export const BufferKind = { Params: 0, Grads: 1, AdamM: 2, AdamV: 3 } as const;
export type BufferKind = (typeof BufferKind)[keyof typeof BufferKind];

export interface NativeModel {
  numParams(): number;
  threads(): number;
  setThreads(threads: number): void;
  tensors(): NativeTensorInfo[];
  read(kind: BufferKind, out: Float32Array): void;
  write(kind: BufferKind, src: Float32Array): void;
  /** Ranges [offsets[i], +sizes[i]) of one buffer to (write) or from values, back to back (rs_model_buffer_ranges). */
  ranges(kind: BufferKind, write: boolean, offsets: Float64Array, sizes: Float64Array, values: Float32Array): void;
  stepCount(): number;
  setStepCount(step: number): void;
  zeroGrad(): void;
  /** ZeRO-1: keep the AdamW moments of the flat slice [offset, offset + count) only (rs_model_shard_optimizer). */
  shardOptimizer(offset: number, count: number): void;
  optimizerShard(): { offset: number; count: number };
  /** AdamW on the slice from the grads' slice (the ranks' sum) and the global norm (rs_model_shard_step). */
  shardStep(opts: NativeStepOptions, gradNorm: number): Promise<NativeStepResult>;
  /** MPI reduce-scatter of the grads in place (this rank's slice is the sum); returns the slice's sum of squares. */
  reduceScatterGrads(counts: number[]): number;
  /** MPI all-gather of the params in place (every rank's slice). */
  allGatherParams(counts: number[]): void;
  /** The same two collectives over NCCL on the model's device buffers (the CUDA backend). */
  ncclReduceScatterGrads(handle: number, counts: Float64Array, rank: number): number;
  ncclAllGatherParams(handle: number, counts: Float64Array): void;
  /** LoRA dropout of the following trainMicro calls; targets [weightOffset, a, b] per target (rs_model_set_lora). */
  setLora(rank: number, scale: number, dropout: number, seed: number, targets: Float64Array, adapters: Float32Array): void;
  /** The LoRA dropout correction's adapter gradient, accumulated since zeroGrad (rs_model_lora_grads). */
  loraGrads(out: Float32Array): void;
  forward(tokens: Int32Array, segmentStarts: Int32Array, segmentParents: Int32Array | null): Promise<Float32Array>;
  trainMicro(
    tokens: Int32Array,
    segmentStarts: Int32Array,
    segmentParents: Int32Array | null,
    lossMask: Uint8Array,
    advantages: Float32Array | null,
    samplerLogprobs: Float32Array | null,
    spec: NativeLossSpec,
    wantTokenLogprobs: boolean,
  ): Promise<NativeLossStats>;
  step(opt: NativeStepOptions): Promise<NativeStepResult>;
  generate(prompts: Int32Array, offsets: Float64Array, seeds: BigUint64Array | null, cfg: NativeGenerateConfig): Promise<NativeGenerateOutput>;
  /** rs_engine_create over this model (kernels/engine.ts wraps it). */
  createEngine(cfg: NativeEngineConfig): NativeEngine;
  dispose(): void;
}

/** rs_engine_config (kernels.h); 0 = the library's default where kernels.h names one. */
export interface NativeEngineConfig {
  blockSize: number;
  nBlocks: number;
  maxSeqs: number;
  maxPrefillTokens: number;
  cacheAcrossVersions: boolean;
}

/** rs_engine_request less the prompt and seeds. */
export interface NativeEngineParams {
  maxNewTokens: number;
  temperature: number;
  topP: number;
  topK: number;
  vocabLimit: number;
  eos: Int32Array;
  stopFlat: Int32Array;
  stopOffsets: Int32Array;
  cacheSalt: bigint;
}

/** One rs_engine_step, column by column (token i: seqIds[i], index[i], ...; finish j: finishedIds[j], ...). */
export interface NativeEngineStep {
  seqIds: Float64Array;
  index: Int32Array;
  tokens: Int32Array;
  logprobs: Float32Array;
  policyLogprobs: Float32Array;
  versions: Float64Array;
  finishedIds: Float64Array;
  stopReasons: Int32Array;
  finishedTokens: Int32Array;
  prefillRows: number;
  decodeRows: number;
  logits?: Float32Array;
}

/** rs_engine_stats (kernels.h), camel-cased. */
export interface NativeEngineStats {
  version: number;
  blocksTotal: number;
  blocksUsed: number;
  blocksCachedIdle: number;
  blocksFree: number;
  running: number;
  waiting: number;
  steps: number;
  prefillRows: number;
  decodeRows: number;
  promptTokens: number;
  prefixHitTokens: number;
  sharedPromptTokens: number;
  preemptions: number;
  cowCopies: number;
  tokensGenerated: number;
}

export interface NativeEngine {
  add(prompt: Int32Array, seeds: BigUint64Array, params: NativeEngineParams): Float64Array;
  step(returnLogits: boolean): Promise<NativeEngineStep>;
  cancel(seqId: number): void;
  setVersion(version: number, mode: 0 | 1): void;
  stats(): NativeEngineStats;
  dispose(): void;
}

/** The backend's methods; argument order mirrors the C ABI (see kernels/addon/kernels_api.cc). */
export interface NativeBackend {
  info(): string;
  path(): string;
  deviceCount(): number;
  setThreads(n: number): void;
  /** rs_set_settings: all fields at once, checked by the library (nothing changes when it throws); forgets the CPU
   *  dispatcher's measured routes and pins settings.blasRoutes. Prefer configureKernels, which every backend follows. */
  setSettings(settings: KernelSettings): void;
  /** rs_get_settings: what this library runs with. */
  settings(): KernelSettings;
  /** TEST ONLY: rs_set_test_hooks (kernels/testing.ts). */
  setTestHooks(hooks: NativeTestHooks): void;
  createModel(cfg: NativeModelConfig, seed: bigint): NativeModel;
  /** Whether this backend's learner ranks can use NCCL (the CUDA backend, with libnccl found), and which or why not. */
  nccl(): { available: boolean; describe: string };
  /** Rank 0: the NCCL communicator's id (128 bytes) that every rank's ncclInit takes. */
  ncclUniqueId(): Uint8Array;
  /** Joins the NCCL communicator on `device`; a handle for the model's ncclReduceScatterGrads / ncclAllGatherParams. */
  ncclInit(nranks: number, id: Uint8Array, rank: number, device: number): number;
  embeddingFwd(table: Float32Array, V: number, D: number, ids: Int32Array, out: Float32Array): void;
  embeddingBwd(dout: Float32Array, ids: Int32Array, V: number, D: number, dtable: Float32Array): void;
  rmsnormFwd(x: Float32Array, w: Float32Array, T: number, D: number, eps: number, y: Float32Array, rstd: Float32Array): void;
  rmsnormBwd(dy: Float32Array, x: Float32Array, w: Float32Array, rstd: Float32Array, T: number, D: number, dx: Float32Array, dw: Float32Array | null): void;
  residualRmsnormFwd(
    x: Float32Array,
    residual: Float32Array,
    w: Float32Array,
    T: number,
    D: number,
    eps: number,
    r: Float32Array,
    y: Float32Array,
    rstd: Float32Array,
  ): void;
  residualRmsnormBwd(
    dy: Float32Array,
    drIn: Float32Array | null,
    r: Float32Array,
    w: Float32Array,
    rstd: Float32Array,
    T: number,
    D: number,
    dx: Float32Array,
    dw: Float32Array | null,
  ): void;
  sgemm(
    transA: boolean,
    transB: boolean,
    M: number,
    N: number,
    K: number,
    alpha: number,
    A: Float32Array,
    lda: number,
    B: Float32Array,
    ldb: number,
    beta: number,
    C: Float32Array,
    ldc: number,
    impl: number,
  ): void;
  sgemmAsync(
    transA: boolean,
    transB: boolean,
    M: number,
    N: number,
    K: number,
    alpha: number,
    A: Float32Array,
    lda: number,
    B: Float32Array,
    ldb: number,
    beta: number,
    C: Float32Array,
    ldc: number,
    impl: number,
    threads: number,
  ): Promise<void>;
  matmulFwd(x: Float32Array, W: Float32Array, b: Float32Array | null, N: number, inDim: number, outDim: number, y: Float32Array): void;
  matmulBwd(
    dy: Float32Array,
    x: Float32Array,
    W: Float32Array,
    N: number,
    inDim: number,
    outDim: number,
    dx: Float32Array | null,
    dW: Float32Array | null,
    db: Float32Array | null,
  ): void;
  ropeFwd(x: Float32Array, T: number, heads: number, headDim: number, positions: Int32Array, theta: number, y: Float32Array): void;
  ropeBwd(dy: Float32Array, T: number, heads: number, headDim: number, positions: Int32Array, theta: number, dx: Float32Array): void;
  attentionFwd(
    q: Float32Array,
    k: Float32Array,
    v: Float32Array,
    T: number,
    H: number,
    KV: number,
    hd: number,
    segmentStarts: Int32Array,
    out: Float32Array,
    lse: Float32Array,
  ): void;
  attentionBwd(
    dout: Float32Array,
    q: Float32Array,
    k: Float32Array,
    v: Float32Array,
    out: Float32Array,
    lse: Float32Array,
    T: number,
    H: number,
    KV: number,
    hd: number,
    segmentStarts: Int32Array,
    dq: Float32Array,
    dk: Float32Array,
    dv: Float32Array,
  ): void;
  swigluFwd(gate: Float32Array, up: Float32Array, h: Float32Array): void;
  swigluBwd(dh: Float32Array, gate: Float32Array, up: Float32Array, dgate: Float32Array, dup: Float32Array): void;
  lossFwdBwd(
    logits: Float32Array,
    N: number,
    V: number,
    targets: Int32Array,
    mask: Uint8Array,
    advantages: Float32Array | null,
    samplerLogprobs: Float32Array | null,
    spec: NativeLossSpec,
    dlogits: Float32Array | null,
    tokenLogprobs: Float32Array | null,
  ): NativeLossStats;
  gradNorm(g: Float32Array): number;
  adamw(
    p: Float32Array,
    g: Float32Array,
    m: Float32Array,
    v: Float32Array,
    lr: number,
    beta1: number,
    beta2: number,
    eps: number,
    weightDecay: number,
    step: number,
    gradScale: number,
  ): void;
}

/** The learner ranks' MPI collectives (kernels/addon/comm.cc); every call throws when the build has no MPI. */
export interface NativeComm {
  available: boolean;
  init(): { rank: number; size: number };
  reduceScatter(send: Float32Array, recv: Float32Array, counts: number[]): void;
  allGather(send: Float32Array, recv: Float32Array, counts: number[]): void;
  allReduceSum(values: Float64Array): void;
  barrier(): void;
  /** In place: every rank gets `root`'s bytes (same byte length on every rank). */
  bcast(buf: ArrayBufferView, root?: number): void;
  /** A non-blocking bcast; poll test(id) until true (the buffer must stay untouched until then). */
  bcastBegin(buf: ArrayBufferView, root?: number): number;
  test(request: number): boolean;
  /** Ends every rank of the job with this exit code. */
  abort(code?: number): void;
  finalize(): void;
}

interface Addon {
  openBackend(path: string): NativeBackend;
  abiVersion: number;
  comm: NativeComm;
}

/** The addon's communicator functions. */
export function nativeComm(): NativeComm {
  return loadAddon().comm;
}

/** The folder holding package.json and kernels/binding.gyp, found by walking up from this file (works from dist-*). */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "kernels", "binding.gyp"))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error(`kernels: cannot find the rollstream package root above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
}

/** Where node-gyp put the addon and the backend libraries. */
export function buildDir(): string {
  return join(packageRoot(), "kernels", "build", "Release");
}

let addon: Addon | undefined;
function loadAddon(): Addon {
  if (addon) return addon;
  const file = join(buildDir(), "rollstream_kernels.node");
  if (!existsSync(file)) {
    throw new Error(`kernels: native addon not built (${file} is missing); run \`npm install\` or \`cd kernels && npx node-gyp rebuild\``);
  }
  addon = createRequire(import.meta.url)(file) as Addon;
  return addon;
}

const LIB_NAME: Record<Device, string> = { cpu: "librollstream_cpu.so", cuda: "librollstream_cuda.so" };
const backends = new Map<Device, NativeBackend>();

/** The process's settings: every backend gets them when it is opened. */
let configured: KernelSettings = { ...DEFAULT_KERNEL_SETTINGS };

/** The settings backends opened from now on get (each open backend reports its own: NativeBackend.settings()). */
export function kernelSettings(): KernelSettings {
  return { ...configured };
}

/**
 * Changes the given fields of the kernel settings, in every backend already open and in those opened later; the
 * other fields keep their values. Throws the library's message (naming the field) when a backend refuses, and then
 * nothing has changed. Every call forgets the CPU dispatcher's measured routes (and pins `blasRoutes`).
 */
export function configureKernels(changes: Partial<KernelSettings>): void {
  const done: Array<[NativeBackend, KernelSettings]> = [];
  try {
    for (const be of backends.values()) {
      const before = be.settings();
      be.setSettings({ ...before, ...changes });
      done.push([be, before]);
    }
  } catch (e) {
    for (const [be, before] of done) be.setSettings(before);
    throw e;
  }
  configured = { ...configured, ...changes };
}

function openDevice(device: Device): NativeBackend {
  const cached = backends.get(device);
  if (cached) return cached;
  const path = join(buildDir(), LIB_NAME[device]);
  if (!existsSync(path)) {
    throw new Error(
      device === "cuda"
        ? `kernels: device "cuda" requested but the CUDA backend is not built (${path} is missing)`
        : `kernels: CPU backend not built (${path} is missing); run \`cd kernels && npx node-gyp rebuild\``,
    );
  }
  const be = loadAddon().openBackend(path);
  be.setSettings(configured); // before anything can load a BLAS library
  if (be.deviceCount() < 1) throw new Error(`kernels: device "${device}" backend loaded from ${path} but it sees no device`);
  backends.set(device, be);
  return be;
}

export interface ResolvedBackend {
  device: Device;
  backend: NativeBackend;
  /** Why this backend was chosen (for the log line the caller writes). */
  reason: string;
}

/** auto: the CUDA backend when it is built and sees a GPU, else the CPU one. */
export function resolveBackend(request: DeviceRequest = "auto"): ResolvedBackend {
  if (request !== "auto" && request !== "cpu" && request !== "cuda") {
    throw new Error(`kernels: device must be "auto", "cpu" or "cuda" (got ${JSON.stringify(request)})`);
  }
  if (request !== "auto") return { device: request, backend: openDevice(request), reason: `device "${request}" requested` };
  try {
    return { device: "cuda", backend: openDevice("cuda"), reason: "auto: CUDA backend built and a GPU is visible" };
  } catch (e) {
    return { device: "cpu", backend: openDevice("cpu"), reason: `auto: using the CPU (${(e as Error).message})` };
  }
}
