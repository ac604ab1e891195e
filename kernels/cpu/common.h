// Internal helpers shared by the CPU kernels: error reporting, threading, aligned buffers and the few
// SIMD primitives whose exact operation order the determinism guarantees rest on.
#pragma once
#include <immintrin.h>
#include <omp.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "../kernels.h"
#include "../shared/errors.h"
#include "../shared/exp1.h"
#include "../shared/train_checks.h"

namespace rs {

using rs_shared::fail;
using rs_shared::ok;

int default_threads();
// Threads for the stand-alone kernels on this calling thread (rs_set_num_threads); models set their own.
int current_threads();
void set_current_threads(int n);

// 64-byte aligned float buffer (AVX loads, cache lines); zero-initialised.
struct FloatBuf {
  float* p = nullptr;
  size_t n = 0;
  FloatBuf() = default;
  FloatBuf(const FloatBuf&) = delete;
  FloatBuf& operator=(const FloatBuf&) = delete;
  ~FloatBuf() { std::free(p); }
  // Returns false when out of memory; contents are not preserved.
  bool resize(size_t count) {
    if (count <= n && p) return true;
    std::free(p);
    size_t bytes = ((count * sizeof(float) + 63) / 64) * 64;
    if (bytes == 0) bytes = 64;
    p = static_cast<float*>(std::aligned_alloc(64, bytes));
    n = p ? count : 0;
    if (p) std::memset(p, 0, bytes);
    return p != nullptr;
  }
  void swap(FloatBuf& o) {
    std::swap(p, o.p);
    std::swap(n, o.n);
  }
};

// ---- canonical float primitives: every caller gets the same bits for the same inputs.

inline float hsum8(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// dot(x, w) with two 8-lane accumulators, an 8-wide remainder, then a scalar tail: one fixed order for a
// given length.
inline float dot(const float* x, const float* w, int K) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int k = 0;
  for (; k + 16 <= K; k += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(w + k), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), _mm256_loadu_ps(w + k + 8), a1);
  }
  if (k + 8 <= K) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(w + k), a0);
    k += 8;
  }
  float s = hsum8(_mm256_add_ps(a0, a1));
  for (; k < K; k++) s = std::fmaf(x[k], w[k], s);
  return s;
}

// y += a * x, elementwise (order-free: each element is one fma).
inline void axpy(float a, const float* x, float* y, int n) {
  __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] = std::fmaf(a, x[i], y[i]);
}

// Cephes-style expf, written once for 8 lanes and once for a scalar with the same operations, so a value's
// exp does not depend on whether it fell in a vector body or a tail. Max rel. error ~2 ulp; inputs are
// clamped to [-88.37, 88.37].
inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-88.3762626647949f);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  __m256 x2 = _mm256_mul_ps(x, x);
  y = _mm256_fmadd_ps(y, x2, x);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

using rs_shared::exp1;

// Per-token segment bounds from sorted segment starts: token t attends [begin[t], t], and key j is read by
// queries [j, end[j]).
void segment_bounds(const int32_t* seg_starts, int32_t S, int32_t T, int32_t* begin, int32_t* end);

// Shared validation (kernels/shared/train_checks.h): seg_starts sorted, first 0, all < T.
using rs_shared::check_segments;

}  // namespace rs
