// Rotary position embedding, HF rotate-half convention: element i pairs with i + hd/2.
#include <algorithm>

#include "common.h"
#include "ops.h"

namespace rs {

void RopeTable::ensure(int positions, int head_dim, double rope_theta) {
  if (head_dim == hd && rope_theta == theta && positions <= npos) return;
  if (head_dim != hd || rope_theta != theta) npos = 0;
  const int half = head_dim / 2;
  // Grow geometrically so long prompts do not rebuild the table token by token.
  const int n = std::max(positions, std::min(2 * npos, 1 << 20));
  std::vector<float> inv(half);
  // Mirror HF's float32 arithmetic (rounding of the angle included) so checkpoints see the rotation they
  // were trained with, even at long positions where the float32 angle is visibly rounded.
  const float theta_f = (float)rope_theta;
  for (int i = 0; i < half; i++) {
    const float e = (float)(2 * i) / (float)head_dim;
    const float pw = (float)std::pow((double)theta_f, (double)e);
    inv[i] = 1.0f / pw;
  }
  cos.resize((size_t)n * half);
  sin.resize((size_t)n * half);
  for (int p = 0; p < n; p++)
    for (int i = 0; i < half; i++) {
      const float a = (float)p * inv[i];
      cos[(size_t)p * half + i] = (float)std::cos((double)a);
      sin[(size_t)p * half + i] = (float)std::sin((double)a);
    }
  hd = head_dim;
  theta = rope_theta;
  npos = n;
}

void rope_apply(float* x, int T, int ld, int n_heads, int hd, const int32_t* pos, const RopeTable& tab, bool inverse, int nt) {
  const int half = tab.hd / 2;  // the table's rotary width: the first tab.hd of each head's hd rotate (partial RoPE)
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < T; t++) {
    const float* c = tab.cos.data() + (size_t)pos[t] * half;
    const float* s = tab.sin.data() + (size_t)pos[t] * half;
    for (int h = 0; h < n_heads; h++) {
      float* v = x + (int64_t)t * ld + (int64_t)h * hd;
      for (int i = 0; i < half; i++) {
        const float a = v[i], b = v[i + half];
        if (!inverse) {
          v[i] = a * c[i] - b * s[i];
          v[i + half] = b * c[i] + a * s[i];
        } else {
          v[i] = a * c[i] + b * s[i];
          v[i + half] = b * c[i] - a * s[i];
        }
      }
    }
  }
}

}  // namespace rs

using namespace rs;

static int32_t rope_call(const char* what, const float* in, int32_t T, int32_t H, int32_t hd, const int32_t* positions, double theta,
                         float* out, bool inverse, rs_error* err) {
  if (T < 1 || H < 1 || hd < 2 || hd % 2) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: need T, heads >= 1 and an even head_dim (T=%d heads=%d head_dim=%d)", what, T, H, hd);
  if (!in || !out || !positions) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: null buffer", what);
  if (!(theta > 0)) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: theta must be > 0", what);
  int32_t maxp = 0;
  for (int32_t t = 0; t < T; t++) {
    if (positions[t] < 0 || positions[t] > (1 << 24)) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: position %d at index %d is out of range", what, positions[t], t);
    maxp = std::max(maxp, positions[t]);
  }
  RopeTable tab;
  tab.ensure(maxp + 1, hd, theta);
  if (out != in) std::memcpy(out, in, sizeof(float) * (size_t)T * H * hd);
  rope_apply(out, T, H * hd, H, hd, positions, tab, inverse, current_threads());
  return ok(err);
}

extern "C" {

int32_t rs_rope_fwd(const float* x, int32_t T, int32_t H, int32_t hd, const int32_t* positions, double theta, float* y, rs_error* err) {
  return rope_call("rope_fwd", x, T, H, hd, positions, theta, y, false, err);
}

int32_t rs_rope_bwd(const float* dy, int32_t T, int32_t H, int32_t hd, const int32_t* positions, double theta, float* dx, rs_error* err) {
  return rope_call("rope_bwd", dy, T, H, hd, positions, theta, dx, true, err);
}

}  // extern "C"
