// Per-head RMSNorm of q and k (Qwen3's q_norm / k_norm): every head vector of hd values inside a q|k|v row is
// normalised with its own rstd and scaled by one weight vector of hd shared by all heads, before RoPE. Same
// arithmetic as rmsnorm.cpp (one dot for the sum of squares), so a head's value does not depend on the others.
#include <algorithm>

#include "common.h"
#include "ops.h"

namespace rs {

void head_rmsnorm_fwd(float* x, int T, int ld, int n_heads, int hd, const float* w, float eps, float* raw, int ld_raw, float* rstd,
                      int ld_rstd, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < n_heads; h++) {
      float* v = x + (int64_t)t * ld + (int64_t)h * hd;
      if (raw) std::memcpy(raw + (int64_t)t * ld_raw + (int64_t)h * hd, v, sizeof(float) * hd);
      const float r = 1.0f / std::sqrt(dot(v, v, hd) / (float)hd + eps);
      if (rstd) rstd[(int64_t)t * ld_rstd + h] = r;
      for (int i = 0; i < hd; i++) v[i] = w[i] * (v[i] * r);
    }
  }
}

void head_rmsnorm_bwd(float* g, int T, int ld, int n_heads, int hd, const float* w, const float* raw, int ld_raw, const float* rstd,
                      int ld_rstd, float* dw, int nt) {
  // dw partial sums per fixed block of tokens, added in block order: thread-count independent.
  constexpr int kRows = 64;
  const int chunks = (T + kRows - 1) / kRows;
  std::vector<float> part((size_t)chunks * hd, 0.f);
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> gw(hd);
#pragma omp for schedule(static)
    for (int c = 0; c < chunks; c++) {
      float* p = part.data() + (size_t)c * hd;
      for (int t = c * kRows; t < std::min(T, (c + 1) * kRows); t++) {
        for (int h = 0; h < n_heads; h++) {
          float* dy = g + (int64_t)t * ld + (int64_t)h * hd;
          const float* x = raw + (int64_t)t * ld_raw + (int64_t)h * hd;
          const float r = rstd[(int64_t)t * ld_rstd + h];
          for (int i = 0; i < hd; i++) gw[i] = dy[i] * w[i];
          const float coef = dot(gw.data(), x, hd) / (float)hd * r * r * r;
          for (int i = 0; i < hd; i++) p[i] += dy[i] * (x[i] * r);
          for (int i = 0; i < hd; i++) dy[i] = r * gw[i] - x[i] * coef;
        }
      }
    }
  }
  for (int c = 0; c < chunks; c++)
    for (int i = 0; i < hd; i++) dw[i] += part[(size_t)c * hd + i];
}

}  // namespace rs
