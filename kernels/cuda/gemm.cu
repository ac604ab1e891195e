#include <algorithm>
#include <atomic>

#include "cublas_loader.cuh"
#include "gemm.cuh"

namespace rsc {

const char* math_mode_name(MathMode m) {
  switch (m) {
    case MathMode::FP32: return "fp32";
    case MathMode::TF32: return "tf32";
    case MathMode::BF16: return "bf16";
  }
  return "?";
}

namespace {
std::atomic<int32_t> g_matmul{RS_MATMUL_DEFAULT};
}  // namespace

void set_matmul_setting(int32_t cuda_matmul) { g_matmul.store(cuda_matmul); }

MathMode model_math_mode(bool have_cublas) {
  switch (g_matmul.load()) {
    case RS_MATMUL_FP32: return MathMode::FP32;
    case RS_MATMUL_TF32: return MathMode::TF32;
    case RS_MATMUL_BF16: return MathMode::BF16;
    default: return have_cublas ? MathMode::BF16 : MathMode::FP32;
  }
}

namespace {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }

// One BM x BN tile of C per block, BK = 16 deep slices of op(A) and op(B) staged in shared memory, a TM x TN
// register tile per thread (rows ty + r * BM/TM, columns tx + c * BN/TN: strided so shared reads do not
// conflict). Every C element is acc = fma(a_k, b_k, acc) for k = 0, 1, ..., K-1 in order, then
// alpha * acc (+ beta * C): the same operations for every tile shape, hence row independence.
template <int BM, int BN, int TM, int TN, class TB>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    gemm_tiled_kernel(int M, int N, int K, float alpha, const float* __restrict__ A, int lda, int ta, const TB* __restrict__ B,
                      int ldb, int tb, float beta, float* __restrict__ C, int ldc) {
  constexpr int BK = 16, NT = (BM / TM) * (BN / TN), TX = BN / TN, TY = BM / TM;
  __shared__ float As[BK][BM + 4];
  __shared__ float Bs[BK][BN + 4];
  const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[TM][TN];
#pragma unroll
  for (int r = 0; r < TM; r++)
#pragma unroll
    for (int c = 0; c < TN; c++) acc[r][c] = 0.f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int e = tid; e < BM * BK; e += NT) {
      int i, k;
      if (ta) {  // op(A)(i, k) = A[k, i]: consecutive threads walk i (contiguous in memory)
        k = e / BM;
        i = e % BM;
      } else {
        i = e / BK;
        k = e % BK;
      }
      const int gi = m0 + i, gk = k0 + k;
      float v = 0.f;
      if (gi < M && gk < K) v = ta ? A[(int64_t)gk * lda + gi] : A[(int64_t)gi * lda + gk];
      As[k][i] = v;
    }
    for (int e = tid; e < BN * BK; e += NT) {
      int j, k;
      if (tb) {  // op(B)(k, j) = B[j, k]: the HF weight W[out, in] read as W^T
        j = e / BK;
        k = e % BK;
      } else {
        k = e / BN;
        j = e % BN;
      }
      const int gj = n0 + j, gk = k0 + k;
      float v = 0.f;
      if (gj < N && gk < K) v = to_f(tb ? B[(int64_t)gj * ldb + gk] : B[(int64_t)gk * ldb + gj]);
      Bs[k][j] = v;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; k++) {
      float a[TM], b[TN];
#pragma unroll
      for (int r = 0; r < TM; r++) a[r] = As[k][ty + r * TY];
#pragma unroll
      for (int c = 0; c < TN; c++) b[c] = Bs[k][tx + c * TX];
#pragma unroll
      for (int r = 0; r < TM; r++)
#pragma unroll
        for (int c = 0; c < TN; c++) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < TM; r++) {
    const int i = m0 + ty + r * TY;
    if (i >= M) continue;
#pragma unroll
    for (int c = 0; c < TN; c++) {
      const int j = n0 + tx + c * TX;
      if (j >= N) continue;
      float* cp = C + (int64_t)i * ldc + j;
      const float v = alpha * acc[r][c];
      *cp = beta == 0.f ? v : fmaf(beta, *cp, v);
    }
  }
}

int sm_count() {
  static int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return 100;
    }
    return v;
  }();
  return n;
}

template <class TB>
void launch_own(cudaStream_t s, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const TB* B, int ldb,
                float beta, float* C, int ldc) {
  const int64_t big_tiles = (int64_t)((M + 63) / 64) * ((N + 63) / 64);
  // Small products get 32 x 32 tiles so more blocks run; the per-element arithmetic is the same either way.
  if (big_tiles >= 2LL * sm_count()) {
    dim3 grid((N + 63) / 64, (M + 63) / 64);
    if (grid.y > 65535) raise(RS_ERR_UNSUPPORTED, "gemm: M=%d is too large for one launch", M);
    gemm_tiled_kernel<64, 64, 4, 4, TB><<<grid, 256, 0, s>>>(M, N, K, alpha, A, lda, ta, B, ldb, tb, beta, C, ldc);
    check_launch("gemm_tiled_kernel<64x64>", s);
  } else {
    dim3 grid((N + 31) / 32, (M + 31) / 32);
    if (grid.y > 65535) raise(RS_ERR_UNSUPPORTED, "gemm: M=%d is too large for one launch", M);
    gemm_tiled_kernel<32, 32, 2, 2, TB><<<grid, 256, 0, s>>>(M, N, K, alpha, A, lda, ta, B, ldb, tb, beta, C, ldc);
    check_launch("gemm_tiled_kernel<32x32>", s);
  }
}

// Dense bf16 copy of a rows x cols row-major matrix with row stride ld.
__global__ void to_bf16_matrix_kernel(const float* __restrict__ src, int64_t rows, int cols, int ld, bf16* __restrict__ dst) {
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    dst[e] = __float2bfloat16_rn(src[r * ld + c]);
  }
}

const bf16* bf16_copy(cudaStream_t s, DevBuf<bf16>& buf, const float* src, int64_t rows, int cols, int ld) {
  buf.reserve((size_t)(rows * cols), "bf16 gemm operand");
  const int64_t n = rows * cols;
  const unsigned blocks = (unsigned)std::min<int64_t>(grid_for(n, 256), 65535LL * 16);
  to_bf16_matrix_kernel<<<blocks, 256, 0, s>>>(src, rows, cols, ld, buf.p);
  check_launch("to_bf16_matrix_kernel", s);
  return buf.p;
}

__global__ void to_bf16_kernel(const float* __restrict__ src, int64_t n, bf16* __restrict__ dst) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void add_bias_kernel(float* __restrict__ y, int N, int out, int ld, const float* __restrict__ b) {
  const int64_t n = (int64_t)N * out;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / out;
    const int c = (int)(e % out);
    y[r * ld + c] += b[c];
  }
}

constexpr int kColsumRows = 128;

__global__ void colsum_partial_kernel(const float* __restrict__ X, int N, int cols, int ld, float* __restrict__ part) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, c = blockIdx.y;
  if (j >= cols) return;
  const int r1 = min(N, (c + 1) * kColsumRows);
  float s = 0.f;
  for (int r = c * kColsumRows; r < r1; r++) s += X[(int64_t)r * ld + j];
  part[(int64_t)c * cols + j] = s;
}

__global__ void colsum_finish_kernel(const float* __restrict__ part, int chunks, int cols, float* __restrict__ out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float s = 0.f;
  for (int c = 0; c < chunks; c++) s += part[(int64_t)c * cols + j];
  out[j] += s;
}

}  // namespace

void gemm_own(cudaStream_t s, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
              const bf16* Bh, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (Bh) launch_own<bf16>(s, ta, tb, M, N, K, alpha, A, lda, Bh, ldb, beta, C, ldc);
  else launch_own<float>(s, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(GemmCtx& g, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, const bf16* Bh,
          int ldb, float beta, float* C, int ldc, bool row_independent, const char* what) {
  if (M <= 0 || N <= 0) return;
  const bool bf16_w = g.mode == MathMode::BF16 && Bh != nullptr;
  if (row_independent || !g.cublas || K == 0) {
    gemm_own(g.stream, ta, tb, M, N, K, alpha, A, lda, bf16_w ? nullptr : B, bf16_w ? Bh : nullptr, ldb, beta, C, ldc);
    return;
  }
  if (g.mode == MathMode::BF16) {
    const bf16* a = bf16_copy(g.stream, g.scratch_a, A, ta ? K : M, ta ? M : K, lda);
    const int lda2 = ta ? M : K;
    const bf16* b = Bh;
    int ldb2 = ldb;
    if (!b) {
      b = bf16_copy(g.stream, g.scratch_b, B, tb ? N : K, tb ? K : N, ldb);
      ldb2 = tb ? K : N;
    }
    cublas::gemm(g.cublas, ta, tb, M, N, K, alpha, a, cublas::kR16BF, lda2, b, cublas::kR16BF, ldb2, beta, C, ldc, cublas::kCompute32F,
                 what);
  } else {
    cublas::gemm(g.cublas, ta, tb, M, N, K, alpha, A, cublas::kR32F, lda, B, cublas::kR32F, ldb, beta, C, ldc,
                 g.mode == MathMode::TF32 ? cublas::kCompute32FFastTF32 : cublas::kCompute32F, what);
  }
  if (sync_debug()) sync_stream(g.stream, what);
}

void linear_fwd(GemmCtx& g, const float* x, int N, int in, const float* W, const bf16* Wh, int out, const float* b, float* y,
                bool row_independent, const char* what) {
  gemm(g, false, true, N, out, in, 1.f, x, in, W, Wh, in, 0.f, y, out, row_independent, what);
  if (b) add_bias(g.stream, y, N, out, out, b);
}

void linear_bwd_dx(GemmCtx& g, const float* dy, int N, int out, const float* W, const bf16* Wh, int in, float beta, float* dx,
                   const char* what) {
  gemm(g, false, false, N, in, out, 1.f, dy, out, W, Wh, in, beta, dx, in, false, what);
}

void linear_bwd_dw(GemmCtx& g, const float* dy, const float* x, int N, int in, int out, float* dW, const char* what) {
  gemm(g, true, false, out, in, N, 1.f, dy, out, x, nullptr, in, 1.f, dW, in, false, what);
}

void add_bias(cudaStream_t s, float* y, int N, int out, int ld, const float* b) {
  const int64_t n = (int64_t)N * out;
  if (n <= 0) return;
  add_bias_kernel<<<(unsigned)std::min<int64_t>(grid_for(n, 256), 65535LL * 16), 256, 0, s>>>(y, N, out, ld, b);
  check_launch("add_bias_kernel", s);
}

void colsum_accumulate(cudaStream_t s, const float* X, int N, int cols, int ld, float* out, DevBuf<float>& part) {
  if (N <= 0 || cols <= 0) return;
  const int chunks = (N + kColsumRows - 1) / kColsumRows;
  if (chunks > 65535) raise(RS_ERR_UNSUPPORTED, "column sum: %d rows is too many", N);
  part.reserve((size_t)chunks * cols, "column-sum scratch");
  colsum_partial_kernel<<<dim3(grid_for(cols, 128), chunks), 128, 0, s>>>(X, N, cols, ld, part.p);
  check_launch("colsum_partial_kernel", s);
  colsum_finish_kernel<<<grid_for(cols, 128), 128, 0, s>>>(part.p, chunks, cols, out);
  check_launch("colsum_finish_kernel", s);
}

void to_bf16(cudaStream_t s, const float* src, int64_t n, bf16* dst) {
  if (n <= 0) return;
  to_bf16_kernel<<<(unsigned)std::min<int64_t>(grid_for(n, 256), 65535LL * 16), 256, 0, s>>>(src, n, dst);
  check_launch("to_bf16_kernel", s);
}

}  // namespace rsc

// --------------------------------------------------------------------------------------- ABI entry points
using namespace rsc;

namespace {

// Elements a row-major rows x cols matrix with row stride ld spans in memory.
size_t span(int64_t rows, int64_t cols, int64_t ld) { return rows <= 0 || cols <= 0 ? 0 : (size_t)((rows - 1) * ld + cols); }

// The stand-alone kernels' gemm context: the thread's stream, cuBLAS when requested and loaded, exact fp32.
GemmCtx standalone_ctx(bool want_cublas) {
  GemmCtx g;
  g.stream = thread_stream();
  g.mode = MathMode::FP32;
  if (want_cublas && cublas::available()) g.cublas = cublas::thread_handle(g.stream);
  return g;
}

}  // namespace

extern "C" {

int32_t rs_sgemm(int32_t trans_a, int32_t trans_b, int32_t M, int32_t N, int32_t K, float alpha, const float* A, int32_t lda,
                 const float* B, int32_t ldb, float beta, float* C, int32_t ldc, int32_t impl, rs_error* err) {
  if (M < 0 || N < 0 || K < 0) return fail(err, RS_ERR_INVALID_ARGUMENT, "sgemm: negative size M=%d N=%d K=%d", M, N, K);
  if (!C || (K > 0 && (!A || !B))) return fail(err, RS_ERR_INVALID_ARGUMENT, "sgemm: null matrix pointer");
  const int a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  if (lda < std::max(1, a_cols) || ldb < std::max(1, b_cols) || ldc < std::max(1, N))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "sgemm: leading dimension too small (lda=%d ldb=%d ldc=%d)", lda, ldb, ldc);
  if (impl < 0 || impl > 2) return fail(err, RS_ERR_INVALID_ARGUMENT, "sgemm: impl must be 0 (auto), 1 (own) or 2 (blas)");
  if (impl == 2 && !cublas::available()) return fail(err, RS_ERR_UNSUPPORTED, "sgemm: BLAS requested but %s", cublas::describe().c_str());
  return guard(err, "sgemm", [&] {
    require_device();
    if (M == 0 || N == 0) return;
    GemmCtx g = standalone_ctx(impl != 1);
    const size_t na = K > 0 ? span(trans_a ? K : M, a_cols, lda) : 0, nb = K > 0 ? span(trans_b ? N : K, b_cols, ldb) : 0;
    const size_t nc = span(M, N, ldc);
    DevBuf<float> dA, dB, dC;
    upload(dA, K > 0 ? A : nullptr, na, g.stream, "sgemm A");
    upload(dB, K > 0 ? B : nullptr, nb, g.stream, "sgemm B");
    upload(dC, C, nc, g.stream, "sgemm C");
    if (g.cublas && K > 0)
      cublas::gemm(g.cublas, trans_a, trans_b, M, N, K, alpha, dA.p, cublas::kR32F, lda, dB.p, cublas::kR32F, ldb, beta, dC.p, ldc,
                   cublas::kCompute32F, "sgemm");
    else
      gemm_own(g.stream, trans_a, trans_b, M, N, K, alpha, dA.p, lda, dB.p, nullptr, ldb, beta, dC.p, ldc);
    to_host(C, dC.p, nc * sizeof(float), g.stream, "sgemm C");
  });
}

int32_t rs_matmul_fwd(const float* x, const float* W, const float* b, int32_t N, int32_t in, int32_t out, float* y, rs_error* err) {
  if (N < 1 || in < 1 || out < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "matmul_fwd: sizes must be positive (N=%d in=%d out=%d)", N, in, out);
  if (!x || !W) return fail(err, RS_ERR_INVALID_ARGUMENT, "matmul_fwd: null input");
  if (!y) return fail(err, RS_ERR_INVALID_ARGUMENT, "matmul_fwd: null output");
  return guard(err, "matmul_fwd", [&] {
    require_device();
    GemmCtx g = standalone_ctx(true);
    DevBuf<float> dx, dW, db, dy;
    upload(dx, x, (size_t)N * in, g.stream, "matmul_fwd x");
    upload(dW, W, (size_t)out * in, g.stream, "matmul_fwd W");
    const float* bp = upload(db, b, (size_t)out, g.stream, "matmul_fwd b");
    dy.reserve((size_t)N * out, "matmul_fwd y");
    linear_fwd(g, dx.p, N, in, dW.p, nullptr, out, bp, dy.p, false, "matmul_fwd");
    to_host(y, dy.p, sizeof(float) * (size_t)N * out, g.stream, "matmul_fwd y");
  });
}

int32_t rs_matmul_bwd(const float* dy, const float* x, const float* W, int32_t N, int32_t in, int32_t out, float* dx, float* dW,
                      float* db, rs_error* err) {
  if (N < 1 || in < 1 || out < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "matmul_bwd: sizes must be positive (N=%d in=%d out=%d)", N, in, out);
  if (!x || !W) return fail(err, RS_ERR_INVALID_ARGUMENT, "matmul_bwd: null input");
  if (!dy) return fail(err, RS_ERR_INVALID_ARGUMENT, "matmul_bwd: null dy");
  return guard(err, "matmul_bwd", [&] {
    require_device();
    GemmCtx g = standalone_ctx(true);
    DevBuf<float> ddy, dxin, dWt, ddx, ddW, ddb, part;
    upload(ddy, dy, (size_t)N * out, g.stream, "matmul_bwd dy");
    if (dx) {
      upload(dWt, W, (size_t)out * in, g.stream, "matmul_bwd W");
      ddx.reserve((size_t)N * in, "matmul_bwd dx");
      linear_bwd_dx(g, ddy.p, N, out, dWt.p, nullptr, in, 0.f, ddx.p, "matmul_bwd dx");
      to_host(dx, ddx.p, sizeof(float) * (size_t)N * in, g.stream, "matmul_bwd dx");
    }
    if (dW) {
      upload(dxin, x, (size_t)N * in, g.stream, "matmul_bwd x");
      upload(ddW, dW, (size_t)out * in, g.stream, "matmul_bwd dW");
      linear_bwd_dw(g, ddy.p, dxin.p, N, in, out, ddW.p, "matmul_bwd dW");
      to_host(dW, ddW.p, sizeof(float) * (size_t)out * in, g.stream, "matmul_bwd dW");
    }
    if (db) {
      upload(ddb, db, (size_t)out, g.stream, "matmul_bwd db");
      colsum_accumulate(g.stream, ddy.p, N, out, out, ddb.p, part);
      to_host(db, ddb.p, sizeof(float) * (size_t)out, g.stream, "matmul_bwd db");
    }
  });
}

}  // extern "C"
