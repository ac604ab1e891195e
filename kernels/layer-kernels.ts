// Thin typed wrappers of the stand-alone layer kernels (CPU backend), for tests and benchmarks. Each
// allocates its outputs and returns them; backward kernels return fresh gradients (the native
// "accumulate" outputs start from zeros here). Shapes are row-major; Linear weights are HF [out, in].
import { toNativeLossSpec, type LossSpec } from "./loss-spec.js";
import { configureKernels, resolveBackend, type BlasMode, type NativeBackend } from "./native.js";
import { OptimizerSchema } from "./optimizer.js";
import type { MicroStats } from "./policy-model.js";
import { checkSegments, checkTokenIds, expectArray, expectFinite, expectInt } from "./validate.js";

let cpu: NativeBackend | undefined;
function be(): NativeBackend {
  cpu ??= resolveBackend("cpu").backend;
  return cpu;
}

const f32 = (n: number) => new Float32Array(n);
const F = Float32Array;

export interface AttentionDims {
  T: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  segmentStarts: Int32Array;
}

function checkAttention(what: string, d: AttentionDims): void {
  expectInt(`${what}: T`, d.T, 1);
  expectInt(`${what}: heads`, d.heads, 1);
  expectInt(`${what}: kvHeads`, d.kvHeads, 1);
  expectInt(`${what}: headDim`, d.headDim, 1);
  if (d.heads % d.kvHeads !== 0) throw new RangeError(`${what}: heads ${d.heads} is not divisible by kvHeads ${d.kvHeads}`);
  expectArray(`${what}: segmentStarts`, d.segmentStarts, Int32Array);
  checkSegments(d.segmentStarts, d.T, Number.MAX_SAFE_INTEGER);
}

export type GemmImpl = "auto" | "own" | "blas";
export type { BlasMode };
const BLAS_MODES: readonly BlasMode[] = ["auto", "off", "on"];
const IMPL: Record<GemmImpl, number> = { auto: 0, own: 1, blas: 2 };

export interface SgemmArgs {
  transA?: boolean;
  transB?: boolean;
  M: number;
  N: number;
  K: number;
  alpha?: number;
  beta?: number;
  A: Float32Array;
  B: Float32Array;
  /** Updated in place: C = alpha op(A) op(B) + beta C. */
  C: Float32Array;
  lda?: number;
  ldb?: number;
  ldc?: number;
  impl?: GemmImpl;
}

function gemmArgs(a: SgemmArgs) {
  const ta = a.transA ?? false,
    tb = a.transB ?? false;
  const M = expectInt("sgemm: M", a.M, 0),
    N = expectInt("sgemm: N", a.N, 0),
    K = expectInt("sgemm: K", a.K, 0);
  const lda = a.lda ?? Math.max(1, ta ? M : K),
    ldb = a.ldb ?? Math.max(1, tb ? K : N),
    ldc = a.ldc ?? Math.max(1, N);
  const impl = a.impl ?? "auto";
  if (!(impl in IMPL)) throw new RangeError(`sgemm: impl must be "auto", "own" or "blas" (got ${impl})`);
  expectArray("sgemm: A", a.A, F);
  expectArray("sgemm: B", a.B, F);
  expectArray("sgemm: C", a.C, F);
  return [ta, tb, M, N, K, a.alpha ?? 1, a.A, lda, a.B, ldb, a.beta ?? 0, a.C, ldc, IMPL[impl]] as const;
}

export const kernels = {
  /** Threads for these stand-alone kernels (0 = all cores). */
  setThreads(n: number): void {
    be().setThreads(expectInt("setThreads: n", n, 0, 4096));
  },
  /**
   * configureKernels({ blasMode }): how "auto" products are routed: "auto" times our sgemm and OpenBLAS per shape
   * class and takes the faster (KernelSettings.blasRoutes pins recorded routes), "off" our sgemm only, "on" OpenBLAS
   * for every product of at least 2^19 multiply-adds, unmeasured. Forgets measured routes. Returns whether BLAS is
   * loaded and not off.
   */
  setBlasMode(mode: BlasMode): boolean {
    if (!BLAS_MODES.includes(mode)) throw new RangeError(`setBlasMode: mode must be "auto", "off" or "on" (got ${mode})`);
    configureKernels({ blasMode: mode });
    return !(JSON.parse(be().info()) as { blas: string }).blas.startsWith("none");
  },

  /**
   * The dispatcher's shape class of a product ("nt:2048x256x128:2t": transposes, M, N and K each rounded down to a
   * power of 2, threads), as named in BackendInfo.blasRoutes; "" for products under 2^15 multiply-adds, which always
   * run on our sgemm. Mirrors class_name() in kernels/cpu/gemm_router.cpp (test/kernels/blas-dispatch.test.ts checks
   * they agree).
   */
  gemmClass(transA: boolean, transB: boolean, M: number, N: number, K: number, threads: number): string {
    if (M * N * K < 2 ** 15) return "";
    const bucket = (x: number) => {
      let b = 1;
      while (b * 2 <= x) b *= 2;
      return b;
    };
    return `${transA ? "t" : "n"}${transB ? "t" : "n"}:${bucket(M)}x${bucket(N)}x${bucket(K)}:${threads}t`;
  },

  /** configureKernels({ simd }): lets our sgemm use its AVX-512 micro-kernel when the CPU has one (true) or forces
   * AVX2 (false); the bits are identical either way. Returns whether AVX-512 is now in use. */
  setAvx512(enabled: boolean): boolean {
    configureKernels({ simd: enabled ? "best" : "avx2" });
    return (JSON.parse(be().info()) as { simd: string }).simd.includes("avx512f-sgemm");
  },

  embeddingForward(table: Float32Array, vocab: number, dim: number, ids: Int32Array): Float32Array {
    expectArray("embeddingForward: table", table, F, vocab * dim);
    checkTokenIds("embeddingForward: ids", expectArray("embeddingForward: ids", ids, Int32Array), vocab);
    const out = f32(ids.length * dim);
    be().embeddingFwd(table, vocab, dim, ids, out);
    return out;
  },
  /** dtable[ids[t]] += dout[t]. */
  embeddingBackward(dout: Float32Array, ids: Int32Array, vocab: number, dim: number): Float32Array {
    checkTokenIds("embeddingBackward: ids", expectArray("embeddingBackward: ids", ids, Int32Array), vocab);
    expectArray("embeddingBackward: dout", dout, F, ids.length * dim);
    const dtable = f32(vocab * dim);
    be().embeddingBwd(dout, ids, vocab, dim, dtable);
    return dtable;
  },

  rmsnormForward(x: Float32Array, w: Float32Array, T: number, D: number, eps: number): { y: Float32Array; rstd: Float32Array } {
    expectArray("rmsnormForward: x", x, F, T * D);
    expectArray("rmsnormForward: w", w, F, D);
    const y = f32(T * D),
      rstd = f32(T);
    be().rmsnormFwd(x, w, T, D, expectFinite("rmsnormForward: eps", eps), y, rstd);
    return { y, rstd };
  },
  rmsnormBackward(dy: Float32Array, x: Float32Array, w: Float32Array, rstd: Float32Array, T: number, D: number): { dx: Float32Array; dw: Float32Array } {
    expectArray("rmsnormBackward: dy", dy, F, T * D);
    expectArray("rmsnormBackward: x", x, F, T * D);
    expectArray("rmsnormBackward: w", w, F, D);
    expectArray("rmsnormBackward: rstd", rstd, F, T);
    const dx = f32(T * D),
      dw = f32(D);
    be().rmsnormBwd(dy, x, w, rstd, T, D, dx, dw);
    return { dx, dw };
  },
  /** r = x + residual; y = rmsnorm(r). */
  residualRmsnormForward(
    x: Float32Array,
    residual: Float32Array,
    w: Float32Array,
    T: number,
    D: number,
    eps: number,
  ): { r: Float32Array; y: Float32Array; rstd: Float32Array } {
    expectArray("residualRmsnormForward: x", x, F, T * D);
    expectArray("residualRmsnormForward: residual", residual, F, T * D);
    expectArray("residualRmsnormForward: w", w, F, D);
    const r = f32(T * D),
      y = f32(T * D),
      rstd = f32(T);
    be().residualRmsnormFwd(x, residual, w, T, D, expectFinite("residualRmsnormForward: eps", eps), r, y, rstd);
    return { r, y, rstd };
  },
  /** dx (= d x = d residual) = drIn + rmsnorm backward of dy. */
  residualRmsnormBackward(
    dy: Float32Array,
    drIn: Float32Array | null,
    r: Float32Array,
    w: Float32Array,
    rstd: Float32Array,
    T: number,
    D: number,
  ): { dx: Float32Array; dw: Float32Array } {
    expectArray("residualRmsnormBackward: dy", dy, F, T * D);
    if (drIn !== null) expectArray("residualRmsnormBackward: drIn", drIn, F, T * D);
    expectArray("residualRmsnormBackward: r", r, F, T * D);
    expectArray("residualRmsnormBackward: w", w, F, D);
    expectArray("residualRmsnormBackward: rstd", rstd, F, T);
    const dx = f32(T * D),
      dw = f32(D);
    be().residualRmsnormBwd(dy, drIn, r, w, rstd, T, D, dx, dw);
    return { dx, dw };
  },

  /** y[N, out] = x[N, in] W[out, in]^T + b. */
  matmulForward(x: Float32Array, W: Float32Array, b: Float32Array | null, N: number, inDim: number, outDim: number): Float32Array {
    expectArray("matmulForward: x", x, F, N * inDim);
    expectArray("matmulForward: W", W, F, outDim * inDim);
    if (b !== null) expectArray("matmulForward: b", b, F, outDim);
    const y = f32(N * outDim);
    be().matmulFwd(x, W, b, N, inDim, outDim, y);
    return y;
  },
  /** dx = dy W; dW = dy^T x; db = column sums of dy. */
  matmulBackward(
    dy: Float32Array,
    x: Float32Array,
    W: Float32Array,
    N: number,
    inDim: number,
    outDim: number,
  ): { dx: Float32Array; dW: Float32Array; db: Float32Array } {
    expectArray("matmulBackward: dy", dy, F, N * outDim);
    expectArray("matmulBackward: x", x, F, N * inDim);
    expectArray("matmulBackward: W", W, F, outDim * inDim);
    const dx = f32(N * inDim),
      dW = f32(outDim * inDim),
      db = f32(outDim);
    be().matmulBwd(dy, x, W, N, inDim, outDim, dx, dW, db);
    return { dx, dW, db };
  },
  /** Row-major sgemm on our kernel ("own"), OpenBLAS ("blas") or the dispatcher ("auto"); C updated in place. */
  sgemm(a: SgemmArgs): void {
    be().sgemm(...gemmArgs(a));
  },
  /** sgemm on a libuv thread (benchmark-sized products). */
  sgemmAsync(a: SgemmArgs & { threads?: number }): Promise<void> {
    return be().sgemmAsync(...gemmArgs(a), expectInt("sgemmAsync: threads", a.threads ?? 0, 0, 4096));
  },

  /** HF rotate-half RoPE over x [T, heads, headDim] at the given positions. */
  ropeForward(x: Float32Array, T: number, heads: number, headDim: number, positions: Int32Array, theta: number): Float32Array {
    expectArray("ropeForward: x", x, F, T * heads * headDim);
    expectArray("ropeForward: positions", positions, Int32Array, T);
    const y = f32(x.length);
    be().ropeFwd(x, T, heads, headDim, positions, expectFinite("ropeForward: theta", theta), y);
    return y;
  },
  ropeBackward(dy: Float32Array, T: number, heads: number, headDim: number, positions: Int32Array, theta: number): Float32Array {
    expectArray("ropeBackward: dy", dy, F, T * heads * headDim);
    expectArray("ropeBackward: positions", positions, Int32Array, T);
    const dx = f32(dy.length);
    be().ropeBwd(dy, T, heads, headDim, positions, expectFinite("ropeBackward: theta", theta), dx);
    return dx;
  },

  /** Causal GQA attention within segments; q [T, heads, hd], k/v [T, kvHeads, hd]. lse [T, heads] feeds the backward. */
  attentionForward(q: Float32Array, k: Float32Array, v: Float32Array, d: AttentionDims): { out: Float32Array; lse: Float32Array } {
    checkAttention("attentionForward", d);
    expectArray("attentionForward: q", q, F, d.T * d.heads * d.headDim);
    expectArray("attentionForward: k", k, F, d.T * d.kvHeads * d.headDim);
    expectArray("attentionForward: v", v, F, d.T * d.kvHeads * d.headDim);
    const out = f32(q.length),
      lse = f32(d.T * d.heads);
    be().attentionFwd(q, k, v, d.T, d.heads, d.kvHeads, d.headDim, d.segmentStarts, out, lse);
    return { out, lse };
  },
  attentionBackward(
    dout: Float32Array,
    q: Float32Array,
    k: Float32Array,
    v: Float32Array,
    out: Float32Array,
    lse: Float32Array,
    d: AttentionDims,
  ): { dq: Float32Array; dk: Float32Array; dv: Float32Array } {
    checkAttention("attentionBackward", d);
    const nq = d.T * d.heads * d.headDim,
      nk = d.T * d.kvHeads * d.headDim;
    expectArray("attentionBackward: dout", dout, F, nq);
    expectArray("attentionBackward: q", q, F, nq);
    expectArray("attentionBackward: k", k, F, nk);
    expectArray("attentionBackward: v", v, F, nk);
    expectArray("attentionBackward: out", out, F, nq);
    expectArray("attentionBackward: lse", lse, F, d.T * d.heads);
    const dq = f32(nq),
      dk = f32(nk),
      dv = f32(nk);
    be().attentionBwd(dout, q, k, v, out, lse, d.T, d.heads, d.kvHeads, d.headDim, d.segmentStarts, dq, dk, dv);
    return { dq, dk, dv };
  },

  /** h = silu(gate) * up. */
  swigluForward(gate: Float32Array, up: Float32Array): Float32Array {
    expectArray("swigluForward: gate", gate, F);
    expectArray("swigluForward: up", up, F, gate.length);
    const h = f32(gate.length);
    be().swigluFwd(gate, up, h);
    return h;
  },
  swigluBackward(dh: Float32Array, gate: Float32Array, up: Float32Array): { dgate: Float32Array; dup: Float32Array } {
    expectArray("swigluBackward: gate", gate, F);
    expectArray("swigluBackward: dh", dh, F, gate.length);
    expectArray("swigluBackward: up", up, F, gate.length);
    const dgate = f32(gate.length),
      dup = f32(gate.length);
    be().swigluBwd(dh, gate, up, dgate, dup);
    return { dgate, dup };
  },

  /**
   * The fused log-softmax / gather / loss / dlogits kernel over logits [N, vocab]; row r predicts targets[r]
   * and counts when mask[r] = 1. Returns the stats, per-row logprobs and (unless withGrad is false) dlogits.
   */
  lossForwardBackward(a: {
    logits: Float32Array;
    N: number;
    vocab: number;
    targets: Int32Array;
    mask: Uint8Array;
    advantages?: Float32Array;
    samplerLogprobs?: Float32Array;
    loss: LossSpec;
    normalizer: number;
    withGrad?: boolean;
  }): { stats: MicroStats; tokenLogprobs: Float32Array; dlogits?: Float32Array } {
    const spec = toNativeLossSpec(a.loss, a.normalizer);
    expectArray("lossForwardBackward: logits", a.logits, F, a.N * a.vocab);
    expectArray("lossForwardBackward: targets", a.targets, Int32Array, a.N);
    expectArray("lossForwardBackward: mask", a.mask, Uint8Array, a.N);
    const adv = a.advantages === undefined ? null : expectArray("lossForwardBackward: advantages", a.advantages, F, a.N);
    const slp = a.samplerLogprobs === undefined ? null : expectArray("lossForwardBackward: samplerLogprobs", a.samplerLogprobs, F, a.N);
    const dlogits = a.withGrad === false ? null : f32(a.N * a.vocab);
    const tokenLogprobs = f32(a.N);
    const s = be().lossFwdBwd(a.logits, a.N, a.vocab, a.targets, a.mask, adv, slp, spec, dlogits, tokenLogprobs);
    const stats: MicroStats = { ...s };
    return dlogits ? { stats, tokenLogprobs, dlogits } : { stats, tokenLogprobs };
  },

  gradNorm(g: Float32Array): number {
    return be().gradNorm(expectArray("gradNorm: g", g, F));
  },
  /** One AdamW update in place (PyTorch formula); the gradient is multiplied by gradScale first. */
  adamw(
    p: Float32Array,
    g: Float32Array,
    m: Float32Array,
    v: Float32Array,
    o: { lr: number; beta1?: number; beta2?: number; eps?: number; weightDecay?: number; step: number; gradScale?: number },
  ): void {
    expectArray("adamw: p", p, F);
    for (const [n, a] of [
      ["g", g],
      ["m", m],
      ["v", v],
    ] as const)
      expectArray(`adamw: ${n}`, a, F, p.length);
    const d = OptimizerSchema.parse({}); // the one copy of the AdamW defaults
    be().adamw(
      p,
      g,
      m,
      v,
      o.lr,
      o.beta1 ?? d.beta1,
      o.beta2 ?? d.beta2,
      o.eps ?? d.eps,
      o.weightDecay ?? d.weightDecay,
      expectInt("adamw: step", o.step, 1),
      o.gradScale ?? 1,
    );
  },
};

export type Kernels = typeof kernels;
