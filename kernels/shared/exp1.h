// Scalar Cephes-style expf, the exact scalar twin of the CPU backend's AVX2 exp (same clamp, same
// polynomial), so host-side sampling gives the same bits on either backend.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace rs_shared {

inline float exp1(float x) {
  // Same clamp as _mm256_max_ps / _mm256_min_ps (a NaN input becomes the lower bound), inlined (fmin/fmax
  // would be library calls).
  x = x > -88.3762626647949f ? x : -88.3762626647949f;
  x = x < 88.3762626647949f ? x : 88.3762626647949f;
  float fx = std::floor(std::fmaf(x, 1.44269504088896341f, 0.5f));
  x = std::fmaf(-fx, 0.693359375f, x);
  x = std::fmaf(-fx, -2.12194440e-4f, x);
  float y = 1.9875691500E-4f;
  y = std::fmaf(y, x, 1.3981999507E-3f);
  y = std::fmaf(y, x, 8.3334519073E-3f);
  y = std::fmaf(y, x, 4.1665795894E-2f);
  y = std::fmaf(y, x, 1.6666665459E-1f);
  y = std::fmaf(y, x, 5.0000001201E-1f);
  float x2 = x * x;
  y = std::fmaf(y, x2, x);
  y = y + 1.0f;
  int32_t bits = (static_cast<int32_t>(fx) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return y * scale;
}

}  // namespace rs_shared
