// Gradient norm and AdamW (PyTorch's formulation, decoupled weight decay).
#include <algorithm>

#include "common.h"
#include "ops.h"

namespace rs {

double grad_sumsq(const float* g, int64_t n, int nt) {
  // Fixed 64K-element chunks summed in double, then added in chunk order: thread-count independent.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(chunks, 0.0);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t c = 0; c < chunks; c++) {
    const int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
      __m256 v = _mm256_loadu_ps(g + i);
      __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
      a0 = _mm256_fmadd_pd(lo, lo, a0);
      a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    alignas(32) double l[4];
    _mm256_store_pd(l, _mm256_add_pd(a0, a1));
    double s = (l[0] + l[1]) + (l[2] + l[3]);
    for (; i < i1; i++) s += (double)g[i] * g[i];
    part[c] = s;
  }
  double s = 0;
  for (int64_t c = 0; c < chunks; c++) s += part[c];
  return s;
}

void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps, float wd,
           int64_t step, float grad_scale, int nt) {
  const double bc1 = 1.0 - std::pow((double)b1, (double)step);
  const double bc2 = 1.0 - std::pow((double)b2, (double)step);
  const float step_size = (float)(lr / bc1);
  const float inv_sqrt_bc2 = (float)(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - lr * wd;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t i = 0; i < n; i++) {
    const float gi = g[i] * grad_scale;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
    p[i] = p[i] * decay - step_size * (mi / denom);
  }
}

}  // namespace rs

using namespace rs;

extern "C" {

int32_t rs_grad_norm(const float* g, int64_t n, double* out, rs_error* err) {
  if (n < 0 || (n > 0 && !g) || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "grad_norm: bad buffer");
  *out = std::sqrt(grad_sumsq(g, n, current_threads()));
  return ok(err);
}

int32_t rs_adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps, float wd,
                 int64_t step, float grad_scale, rs_error* err) {
  if (n < 0 || (n > 0 && (!p || !g || !m || !v))) return fail(err, RS_ERR_INVALID_ARGUMENT, "adamw: bad buffer");
  if (step < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "adamw: step must be >= 1 (got %lld)", (long long)step);
  if (!(lr >= 0) || !std::isfinite(lr)) return fail(err, RS_ERR_INVALID_ARGUMENT, "adamw: lr must be a finite number >= 0");
  if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) return fail(err, RS_ERR_INVALID_ARGUMENT, "adamw: betas must be in [0, 1)");
  if (!(eps > 0) || !(wd >= 0)) return fail(err, RS_ERR_INVALID_ARGUMENT, "adamw: need eps > 0 and weight decay >= 0");
  adamw(p, g, m, v, n, lr, b1, b2, eps, wd, step, grad_scale, current_threads());
  return ok(err);
}

}  // extern "C"
