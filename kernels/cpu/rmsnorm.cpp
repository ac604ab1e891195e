// RMSNorm (HF order: y = w * (x * rstd)), the fused residual-add form, and their backward.
#include <algorithm>

#include "common.h"
#include "ops.h"

namespace rs {

static inline float row_rstd(const float* x, int D, float eps) {
  float ss = dot(x, x, D);
  return 1.0f / std::sqrt(ss / (float)D + eps);
}

void rmsnorm_fwd(const float* x, const float* w, int T, int D, float eps, float* y, float* rstd, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < T; t++) {
    const float* xr = x + (int64_t)t * D;
    float* yr = y + (int64_t)t * D;
    const float r = row_rstd(xr, D, eps);
    rstd[t] = r;
    for (int i = 0; i < D; i++) yr[i] = w[i] * (xr[i] * r);
  }
}

void residual_rmsnorm_fwd(const float* x, const float* res, const float* w, int T, int D, float eps, float* r, float* y,
                          float* rstd, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < T; t++) {
    const float* xr = x + (int64_t)t * D;
    const float* rr = res + (int64_t)t * D;
    float* out = r + (int64_t)t * D;
    for (int i = 0; i < D; i++) out[i] = xr[i] + rr[i];
    const float s = row_rstd(out, D, eps);
    rstd[t] = s;
    float* yr = y + (int64_t)t * D;
    for (int i = 0; i < D; i++) yr[i] = w[i] * (out[i] * s);
  }
}

void rmsnorm_bwd(const float* dy, const float* x, const float* w, const float* rstd, int T, int D, const float* dr_in,
                 float* dx, float* dw, int nt) {
  // dw partial sums per fixed block of rows, added in block order: thread-count independent.
  constexpr int kRows = 128;
  const int chunks = (T + kRows - 1) / kRows;
  std::vector<float> part((size_t)chunks * D, 0.f);
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> g(D);
#pragma omp for schedule(static)
    for (int c = 0; c < chunks; c++) {
      float* p = part.data() + (size_t)c * D;
      for (int t = c * kRows; t < std::min(T, (c + 1) * kRows); t++) {
        const float* dyr = dy + (int64_t)t * D;
        const float* xr = x + (int64_t)t * D;
        const float r = rstd[t];
        for (int i = 0; i < D; i++) g[i] = dyr[i] * w[i];
        const float coef = dot(g.data(), xr, D) / (float)D * r * r * r;
        float* dxr = dx + (int64_t)t * D;
        const float* din = dr_in ? dr_in + (int64_t)t * D : nullptr;
        for (int i = 0; i < D; i++) {
          float v = r * g[i] - xr[i] * coef;
          dxr[i] = din ? din[i] + v : v;
        }
        for (int i = 0; i < D; i++) p[i] += dyr[i] * (xr[i] * r);
      }
    }
  }
  if (dw)
    for (int c = 0; c < chunks; c++)
      for (int i = 0; i < D; i++) dw[i] += part[(size_t)c * D + i];
}

}  // namespace rs

using namespace rs;

static int32_t check_norm(const char* what, int32_t T, int32_t D, rs_error* err) {
  if (T < 1 || D < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: sizes must be positive (T=%d D=%d)", what, T, D);
  return RS_OK;
}

extern "C" {

int32_t rs_rmsnorm_fwd(const float* x, const float* w, int32_t T, int32_t D, float eps, float* y, float* rstd, rs_error* err) {
  if (int32_t s = check_norm("rmsnorm_fwd", T, D, err)) return s;
  if (!x || !w || !y || !rstd) return fail(err, RS_ERR_INVALID_ARGUMENT, "rmsnorm_fwd: null buffer");
  if (!(eps >= 0.f)) return fail(err, RS_ERR_INVALID_ARGUMENT, "rmsnorm_fwd: eps must be >= 0");
  rmsnorm_fwd(x, w, T, D, eps, y, rstd, current_threads());
  return ok(err);
}

int32_t rs_rmsnorm_bwd(const float* dy, const float* x, const float* w, const float* rstd, int32_t T, int32_t D, float* dx,
                       float* dw, rs_error* err) {
  if (int32_t s = check_norm("rmsnorm_bwd", T, D, err)) return s;
  if (!dy || !x || !w || !rstd || !dx) return fail(err, RS_ERR_INVALID_ARGUMENT, "rmsnorm_bwd: null buffer");
  rmsnorm_bwd(dy, x, w, rstd, T, D, nullptr, dx, dw, current_threads());
  return ok(err);
}

int32_t rs_residual_rmsnorm_fwd(const float* x, const float* residual, const float* w, int32_t T, int32_t D, float eps, float* r,
                                float* y, float* rstd, rs_error* err) {
  if (int32_t s = check_norm("residual_rmsnorm_fwd", T, D, err)) return s;
  if (!x || !residual || !w || !r || !y || !rstd) return fail(err, RS_ERR_INVALID_ARGUMENT, "residual_rmsnorm_fwd: null buffer");
  if (!(eps >= 0.f)) return fail(err, RS_ERR_INVALID_ARGUMENT, "residual_rmsnorm_fwd: eps must be >= 0");
  residual_rmsnorm_fwd(x, residual, w, T, D, eps, r, y, rstd, current_threads());
  return ok(err);
}

int32_t rs_residual_rmsnorm_bwd(const float* dy, const float* dr_in, const float* r, const float* w, const float* rstd, int32_t T,
                                int32_t D, float* dx, float* dw, rs_error* err) {
  if (int32_t s = check_norm("residual_rmsnorm_bwd", T, D, err)) return s;
  if (!dy || !r || !w || !rstd || !dx) return fail(err, RS_ERR_INVALID_ARGUMENT, "residual_rmsnorm_bwd: null buffer");
  rmsnorm_bwd(dy, r, w, rstd, T, D, dr_in, dx, dw, current_threads());
  return ok(err);
}

}  // extern "C"
