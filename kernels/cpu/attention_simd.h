// The score, exp and weighted-sum primitives of attention, one copy for the packed attention (attention.cpp)
// and the paged attention of the engine (paged_attention.cpp): a token's attention output is the same bits
// whichever of the two computes it, because every score is one fma chain over the head dim in one lane, every
// exp is exp8/exp1 (same bits), and every output element is one fma chain over the keys in order.
#pragma once
#include <algorithm>

#include "common.h"

namespace rs {

// Lane mask with the first r (0..8) lanes on.
inline __m256i lane_mask(int r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// NV vectors of 8 lanes (the last one masked to `last` lanes) at once, so NV independent fma chains overlap.
template <int NV>
inline void dots_block(const float* a, const float* b, int64_t ldt, int hd, int last, float* out) {
  __m256 c[NV];
  const __m256i full = _mm256_set1_epi32(-1), tail = lane_mask(last);
  for (int v = 0; v < NV; v++) c[v] = _mm256_setzero_ps();
  for (int d = 0; d < hd; d++, b += ldt) {
    const __m256 av = _mm256_set1_ps(a[d]);
    for (int v = 0; v < NV; v++) c[v] = _mm256_fmadd_ps(av, _mm256_maskload_ps(b + 8 * v, v == NV - 1 ? tail : full), c[v]);
  }
  for (int v = 0; v < NV; v++) _mm256_maskstore_ps(out + 8 * v, v == NV - 1 ? tail : full, c[v]);
}

// out[i] = sum_d a[d] * bt[d * ldt + i] for i < n, d ascending. Every value is one fma chain over d in one
// lane, whichever block it falls in (masked lanes never load), so it does not depend on n or on the blocking.
inline void dots_transposed(const float* a, const float* bt, int64_t ldt, int n, int hd, float* out) {
  for (int i = 0; i < n; i += 32) {
    const int rem = std::min(32, n - i), nv = (rem + 7) / 8, last = rem - 8 * (nv - 1);
    switch (nv) {
      case 4: dots_block<4>(a, bt + i, ldt, hd, last, out + i); break;
      case 3: dots_block<3>(a, bt + i, ldt, hd, last, out + i); break;
      case 2: dots_block<2>(a, bt + i, ldt, hd, last, out + i); break;
      default: dots_block<1>(a, bt + i, ldt, hd, last, out + i); break;
    }
  }
}

// out[i] += sum_j w[j] * rows[j * ld + i] for i < hd, j ascending: the same fma chain per element as
// repeated axpy, with the running sums kept in registers instead of bouncing through memory.
inline void accumulate_rows(const float* w, int n, const float* rows, int64_t ld, int hd, float* out) {
  int i0 = 0;
  for (; i0 + 32 <= hd; i0 += 32) {
    __m256 c0 = _mm256_loadu_ps(out + i0), c1 = _mm256_loadu_ps(out + i0 + 8), c2 = _mm256_loadu_ps(out + i0 + 16),
           c3 = _mm256_loadu_ps(out + i0 + 24);
    const float* r = rows + i0;
    for (int j = 0; j < n; j++, r += ld) {
      const __m256 wv = _mm256_set1_ps(w[j]);
      c0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(r), c0);
      c1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(r + 8), c1);
      c2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(r + 16), c2);
      c3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(r + 24), c3);
    }
    _mm256_storeu_ps(out + i0, c0);
    _mm256_storeu_ps(out + i0 + 8, c1);
    _mm256_storeu_ps(out + i0 + 16, c2);
    _mm256_storeu_ps(out + i0 + 24, c3);
  }
  for (; i0 + 8 <= hd; i0 += 8) {
    __m256 c0 = _mm256_loadu_ps(out + i0);
    const float* r = rows + i0;
    for (int j = 0; j < n; j++, r += ld) c0 = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_loadu_ps(r), c0);
    _mm256_storeu_ps(out + i0, c0);
  }
  for (; i0 < hd; i0++) {
    float c = out[i0];
    for (int j = 0; j < n; j++) c = std::fmaf(w[j], rows[(int64_t)j * ld + i0], c);
    out[i0] = c;
  }
}

// p[i] = exp(s[i] * scale - shift[i or 0]) in place, exp8 in the body and exp1 in the tail (same bits).
inline void exp_scaled(float* s, int n, float scale, const float* shift, bool per_elem) {
  const __m256 vs = _mm256_set1_ps(scale);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 sh = per_elem ? _mm256_loadu_ps(shift + i) : _mm256_set1_ps(shift[0]);
    _mm256_storeu_ps(s + i, exp8(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(s + i), vs), sh)));
  }
  for (; i < n; i++) s[i] = exp1(s[i] * scale - (per_elem ? shift[i] : shift[0]));
}

}  // namespace rs
