// SwiGLU: h = silu(gate) * up, silu(g) = g * sigmoid(g).
#include <algorithm>

#include "common.h"
#include "ops.h"

namespace rs {

// 8 lanes at a time with exp8, the tail with exp1: the same operations per element either way.
void swiglu_fwd(const float* gate, const float* up, int64_t n, float* h) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, g))));
    _mm256_storeu_ps(h + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; i++) {
    const float g = gate[i];
    const float sig = 1.0f / (1.0f + exp1(0.0f - g));
    h[i] = (g * sig) * up[i];
  }
}

void swiglu_bwd(const float* dh, const float* gate, const float* up, int64_t n, float* dgate, float* dup) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i), d = _mm256_loadu_ps(dh + i);
    const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, g))));
    _mm256_storeu_ps(dup + i, _mm256_mul_ps(d, _mm256_mul_ps(g, sig)));
    const __m256 dsilu = _mm256_mul_ps(sig, _mm256_add_ps(one, _mm256_mul_ps(g, _mm256_sub_ps(one, sig))));
    _mm256_storeu_ps(dgate + i, _mm256_mul_ps(_mm256_mul_ps(d, _mm256_loadu_ps(up + i)), dsilu));
  }
  for (; i < n; i++) {
    const float g = gate[i];
    const float sig = 1.0f / (1.0f + exp1(0.0f - g));
    dup[i] = dh[i] * (g * sig);
    dgate[i] = (dh[i] * up[i]) * (sig * (1.0f + g * (1.0f - sig)));
  }
}

void swiglu_fwd_rows(const float* gu, int rows, int I, float* h, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int r = 0; r < rows; r++) swiglu_fwd(gu + (int64_t)r * 2 * I, gu + (int64_t)r * 2 * I + I, I, h + (int64_t)r * I);
}

void swiglu_bwd_rows(const float* dh, const float* gu, int rows, int I, float* dgu, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int r = 0; r < rows; r++) {
    const float* g = gu + (int64_t)r * 2 * I;
    float* d = dgu + (int64_t)r * 2 * I;
    swiglu_bwd(dh + (int64_t)r * I, g, g + I, I, d, d + I);
  }
}

}  // namespace rs

using namespace rs;

extern "C" {

int32_t rs_swiglu_fwd(const float* gate, const float* up, int64_t n, float* h, rs_error* err) {
  if (n < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "swiglu_fwd: n must be positive (got %lld)", (long long)n);
  if (!gate || !up || !h) return fail(err, RS_ERR_INVALID_ARGUMENT, "swiglu_fwd: null buffer");
  const int nt = current_threads();
  const int64_t chunk = 4096, chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t c = 0; c < chunks; c++) {
    const int64_t i0 = c * chunk, m = std::min(chunk, n - i0);
    swiglu_fwd(gate + i0, up + i0, m, h + i0);
  }
  return ok(err);
}

int32_t rs_swiglu_bwd(const float* dh, const float* gate, const float* up, int64_t n, float* dgate, float* dup, rs_error* err) {
  if (n < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "swiglu_bwd: n must be positive (got %lld)", (long long)n);
  if (!dh || !gate || !up || !dgate || !dup) return fail(err, RS_ERR_INVALID_ARGUMENT, "swiglu_bwd: null buffer");
  swiglu_bwd(dh, gate, up, n, dgate, dup);
  return ok(err);
}

}  // extern "C"
