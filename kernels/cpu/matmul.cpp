// Linear layers on top of the gemm dispatcher, and the public rs_sgemm / rs_matmul_* entry points.
#include <algorithm>

#include "blas_dispatch.h"
#include "common.h"
#include "ops.h"

namespace rs {

void linear_fwd(GemmImpl impl, const float* x, int N, int in, const float* W, int out, const float* b, float* y, int nt) {
  gemm(impl, false, true, N, out, in, 1.f, x, in, W, in, 0.f, y, out, nt);
  if (!b) return;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int n = 0; n < N; n++) {
    float* yr = y + (int64_t)n * out;
    for (int o = 0; o < out; o++) yr[o] += b[o];
  }
}

void linear_bwd_dx(GemmImpl impl, const float* dy, int N, int out, const float* W, int in, float beta, float* dx, int nt) {
  gemm(impl, false, false, N, in, out, 1.f, dy, out, W, in, beta, dx, in, nt);
}

void linear_bwd_dw(GemmImpl impl, const float* dy, const float* x, int N, int in, int out, float* dW, int nt) {
  gemm(impl, true, false, out, in, N, 1.f, dy, out, x, in, 1.f, dW, in, nt);
}

void bias_bwd(const float* dy, int N, int out, float* db, int nt) {
  // Chunk boundaries are fixed (not per thread), so the sum order is the same for any thread count.
  constexpr int kRows = 256;
  const int chunks = (N + kRows - 1) / kRows;
  std::vector<float> part((size_t)chunks * out, 0.f);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int c = 0; c < chunks; c++) {
    float* p = part.data() + (size_t)c * out;
    for (int n = c * kRows; n < std::min(N, (c + 1) * kRows); n++) {
      const float* r = dy + (int64_t)n * out;
      for (int o = 0; o < out; o++) p[o] += r[o];
    }
  }
  for (int c = 0; c < chunks; c++)
    for (int o = 0; o < out; o++) db[o] += part[(size_t)c * out + o];
}

}  // namespace rs

using namespace rs;

extern "C" {

int32_t rs_sgemm(int32_t trans_a, int32_t trans_b, int32_t M, int32_t N, int32_t K, float alpha, const float* A,
                 int32_t lda, const float* B, int32_t ldb, float beta, float* C, int32_t ldc, int32_t impl, rs_error* err) {
  if (M < 0 || N < 0 || K < 0) return fail(err, RS_ERR_INVALID_ARGUMENT, "sgemm: negative size M=%d N=%d K=%d", M, N, K);
  if (!C || (K > 0 && (!A || !B))) return fail(err, RS_ERR_INVALID_ARGUMENT, "sgemm: null matrix pointer");
  const int a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  if (lda < std::max(1, a_cols) || ldb < std::max(1, b_cols) || ldc < std::max(1, N))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "sgemm: leading dimension too small (lda=%d ldb=%d ldc=%d)", lda, ldb, ldc);
  if (impl < 0 || impl > 2) return fail(err, RS_ERR_INVALID_ARGUMENT, "sgemm: impl must be 0 (auto), 1 (own) or 2 (blas)");
  if (impl == 2 && !blas::available()) return fail(err, RS_ERR_UNSUPPORTED, "sgemm: BLAS requested but %s", blas::describe().c_str());
  try {
    gemm(static_cast<GemmImpl>(impl), trans_a != 0, trans_b != 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
         current_threads());
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "sgemm: out of memory");
  }
  return ok(err);
}

static int32_t check_linear(const char* what, const float* x, const float* W, int32_t N, int32_t in, int32_t out, rs_error* err) {
  if (N < 1 || in < 1 || out < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: sizes must be positive (N=%d in=%d out=%d)", what, N, in, out);
  if (!x || !W) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: null input", what);
  return RS_OK;
}

int32_t rs_matmul_fwd(const float* x, const float* W, const float* b, int32_t N, int32_t in, int32_t out, float* y, rs_error* err) {
  if (int32_t s = check_linear("matmul_fwd", x, W, N, in, out, err)) return s;
  if (!y) return fail(err, RS_ERR_INVALID_ARGUMENT, "matmul_fwd: null output");
  try {
    linear_fwd(GemmImpl::Auto, x, N, in, W, out, b, y, current_threads());
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "matmul_fwd: out of memory");
  }
  return ok(err);
}

int32_t rs_matmul_bwd(const float* dy, const float* x, const float* W, int32_t N, int32_t in, int32_t out, float* dx, float* dW,
                      float* db, rs_error* err) {
  if (int32_t s = check_linear("matmul_bwd", x, W, N, in, out, err)) return s;
  if (!dy) return fail(err, RS_ERR_INVALID_ARGUMENT, "matmul_bwd: null dy");
  const int nt = current_threads();
  try {
    if (dx) linear_bwd_dx(GemmImpl::Auto, dy, N, out, W, in, 0.f, dx, nt);
    if (dW) linear_bwd_dw(GemmImpl::Auto, dy, x, N, in, out, dW, nt);
    if (db) bias_bwd(dy, N, out, db, nt);
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "matmul_bwd: out of memory");
  }
  return ok(err);
}

}  // extern "C"
