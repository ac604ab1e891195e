// Goto/BLIS-style sgemm: B is packed into KC x NR column strips, A into KC x 6 row strips, and a 6 x NR
// register-blocked FMA micro-kernel runs over tiles of them: 6x16 with AVX2 (12 ymm accumulators), or 6x32
// with AVX-512 (12 zmm) when the CPU has it (chosen at run time; the build stays x86-64-v3). Threads split
// output tiles, never K. Every C element is the same fma chain (k ascending from 0 within each K panel) in
// either kernel, so results are bit-identical across thread counts and across the two SIMD paths.
#include "sgemm.h"

#include <algorithm>
#include <atomic>

#include "common.h"

namespace rs {

namespace {
constexpr int MR = 6, NR_MAX = 32;
constexpr int KC = 256;   // one A strip + one B strip in L1
constexpr int NC = 4096;  // packed B panel: KC x NC floats (4 MB) in L2/L3
constexpr int MB = 3072;  // packed A panel: MB x KC floats (3 MB)

// Per calling thread, reused across calls so big products do not pay for fresh pages every time.
thread_local FloatBuf tl_pack_a, tl_pack_b;

inline float at(const float* M, int ld, bool trans, int r, int c) { return trans ? M[(int64_t)c * ld + r] : M[(int64_t)r * ld + c]; }

void pack_a_strip(bool ta, const float* A, int lda, int i0, int rows, int p0, int kc, float* dst) {
  if (ta) {  // op(A)(i, k) = A[k, i]: rows of A are contiguous along i
    for (int k = 0; k < kc; k++) {
      const float* src = A + (int64_t)(p0 + k) * lda + i0;
      for (int r = 0; r < MR; r++) dst[k * MR + r] = r < rows ? src[r] : 0.f;
    }
  } else {
    for (int r = 0; r < MR; r++) {
      if (r < rows) {
        const float* src = A + (int64_t)(i0 + r) * lda + p0;
        for (int k = 0; k < kc; k++) dst[k * MR + r] = src[k];
      } else {
        for (int k = 0; k < kc; k++) dst[k * MR + r] = 0.f;
      }
    }
  }
}

void pack_b_strip(bool tb, const float* B, int ldb, int p0, int kc, int j0, int cols, float* dst, int NR) {
  if (!tb) {  // op(B)(k, j) = B[k, j]: contiguous along j
    for (int k = 0; k < kc; k++) {
      const float* src = B + (int64_t)(p0 + k) * ldb + j0;
      if (cols == NR) {
        for (int c = 0; c < NR; c += 8) _mm256_store_ps(dst + k * NR + c, _mm256_loadu_ps(src + c));
      } else {
        for (int c = 0; c < NR; c++) dst[k * NR + c] = c < cols ? src[c] : 0.f;
      }
    }
  } else {  // op(B)(k, j) = B[j, k]: the HF Linear weight W[out, in] read as W^T
    for (int c = 0; c < NR; c++) {
      if (c < cols) {
        const float* src = B + (int64_t)(j0 + c) * ldb + p0;
        for (int k = 0; k < kc; k++) dst[k * NR + c] = src[k];
      } else {
        for (int k = 0; k < kc; k++) dst[k * NR + c] = 0.f;
      }
    }
  }
}

// acc[6][32] = sum_k a[k][r] * b[k][c], k ascending, fma per element: the AVX-512 twin of micro_6x16.
__attribute__((target("avx512f"))) void micro_6x32(int kc, const float* __restrict a, const float* __restrict b,
                                                    float* __restrict acc) {
  __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps(), c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
  __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps(), c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
  __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps(), c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
  for (int k = 0; k < kc; k++) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    _mm_prefetch(reinterpret_cast<const char*>(b + 256), _MM_HINT_T0);
    __m512 av = _mm512_set1_ps(a[0]);
    c00 = _mm512_fmadd_ps(av, b0, c00);
    c01 = _mm512_fmadd_ps(av, b1, c01);
    av = _mm512_set1_ps(a[1]);
    c10 = _mm512_fmadd_ps(av, b0, c10);
    c11 = _mm512_fmadd_ps(av, b1, c11);
    av = _mm512_set1_ps(a[2]);
    c20 = _mm512_fmadd_ps(av, b0, c20);
    c21 = _mm512_fmadd_ps(av, b1, c21);
    av = _mm512_set1_ps(a[3]);
    c30 = _mm512_fmadd_ps(av, b0, c30);
    c31 = _mm512_fmadd_ps(av, b1, c31);
    av = _mm512_set1_ps(a[4]);
    c40 = _mm512_fmadd_ps(av, b0, c40);
    c41 = _mm512_fmadd_ps(av, b1, c41);
    av = _mm512_set1_ps(a[5]);
    c50 = _mm512_fmadd_ps(av, b0, c50);
    c51 = _mm512_fmadd_ps(av, b1, c51);
    a += MR;
    b += 32;
  }
  _mm512_store_ps(acc + 0, c00);
  _mm512_store_ps(acc + 16, c01);
  _mm512_store_ps(acc + 32, c10);
  _mm512_store_ps(acc + 48, c11);
  _mm512_store_ps(acc + 64, c20);
  _mm512_store_ps(acc + 80, c21);
  _mm512_store_ps(acc + 96, c30);
  _mm512_store_ps(acc + 112, c31);
  _mm512_store_ps(acc + 128, c40);
  _mm512_store_ps(acc + 144, c41);
  _mm512_store_ps(acc + 160, c50);
  _mm512_store_ps(acc + 176, c51);
}

// acc[6][16] = sum_k a[k][r] * b[k][c], k ascending.
inline void micro_6x16(int kc, const float* __restrict a, const float* __restrict b, float* __restrict acc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(), c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int k = 0; k < kc; k++) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    _mm_prefetch(reinterpret_cast<const char*>(b + 128), _MM_HINT_T0);
    __m256 av = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10);
    c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20);
    c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30);
    c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40);
    c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50);
    c51 = _mm256_fmadd_ps(av, b1, c51);
    a += MR;
    b += 16;
  }
  _mm256_store_ps(acc + 0, c00);
  _mm256_store_ps(acc + 8, c01);
  _mm256_store_ps(acc + 16, c10);
  _mm256_store_ps(acc + 24, c11);
  _mm256_store_ps(acc + 32, c20);
  _mm256_store_ps(acc + 40, c21);
  _mm256_store_ps(acc + 48, c30);
  _mm256_store_ps(acc + 56, c31);
  _mm256_store_ps(acc + 64, c40);
  _mm256_store_ps(acc + 72, c41);
  _mm256_store_ps(acc + 80, c50);
  _mm256_store_ps(acc + 88, c51);
}

// C = alpha*acc + beta*C on the first K panel, C += alpha*acc on later ones; the same formula (and fma)
// whether the tile is full or an edge.
inline void update_tile(const float* acc, int NR, float* C, int ldc, int rows, int cols, float alpha, float beta, bool first) {
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  for (int r = 0; r < rows; r++) {
    float* c = C + (int64_t)r * ldc;
    const float* s = acc + r * NR;
    int j = 0;
    if (cols == NR) {
      for (; j < NR; j += 8) {
        __m256 v = _mm256_load_ps(s + j);
        __m256 out;
        if (!first) out = _mm256_fmadd_ps(va, v, _mm256_loadu_ps(c + j));
        else if (beta == 0.f) out = _mm256_mul_ps(va, v);
        else out = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + j), _mm256_mul_ps(va, v));
        _mm256_storeu_ps(c + j, out);
      }
    }
    for (; j < cols; j++) {
      if (!first) c[j] = std::fmaf(alpha, s[j], c[j]);
      else if (beta == 0.f) c[j] = alpha * s[j];
      else c[j] = std::fmaf(beta, c[j], alpha * s[j]);
    }
  }
}

void scale_c(int M, int N, float beta, float* C, int ldc) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) C[(int64_t)i * ldc + j] = beta == 0.f ? 0.f : beta * C[(int64_t)i * ldc + j];
}
bool detect_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
std::atomic<int> g_simd{-1};  // -1 unknown, 0 avx2, 1 avx512
}  // namespace

bool sgemm_uses_avx512() {
  int v = g_simd.load();
  if (v < 0) {
    v = detect_avx512() ? 1 : 0;
    g_simd.store(v);
  }
  return v == 1;
}

void sgemm_force_avx2(bool force) { g_simd.store(force ? 0 : (detect_avx512() ? 1 : 0)); }

void sgemm_own(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc, int threads) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.f) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  const int nt = std::max(1, threads);
  const bool wide = sgemm_uses_avx512();
  const int NR = wide ? 32 : 16;
  const int kc_max = std::min(K, KC);
  const int nc_max = std::min(N, NC), mb_max = std::min(M, MB);
  const size_t b_need = (size_t)((nc_max + NR - 1) / NR) * NR * kc_max;
  const size_t a_need = (size_t)((mb_max + MR - 1) / MR) * MR * kc_max;
  if (!tl_pack_b.resize(b_need) || !tl_pack_a.resize(a_need)) throw std::bad_alloc();
  float* Bp = tl_pack_b.p;
  float* Ap = tl_pack_a.p;

#pragma omp parallel num_threads(nt)
  {
    alignas(64) float acc[MR * NR_MAX];
    for (int jc = 0; jc < N; jc += NC) {
      const int nc = std::min(NC, N - jc);
      const int nstrips = (nc + NR - 1) / NR;
      for (int pc = 0; pc < K; pc += KC) {
        const int kc = std::min(KC, K - pc);
        const bool first = pc == 0;
#pragma omp for schedule(static)
        for (int s = 0; s < nstrips; s++)
          pack_b_strip(tb, B, ldb, pc, kc, jc + s * NR, std::min(NR, nc - s * NR), Bp + (size_t)s * NR * kc, NR);
        for (int ib = 0; ib < M; ib += MB) {
          const int mb = std::min(MB, M - ib);
          const int mstrips = (mb + MR - 1) / MR;
#pragma omp for schedule(static)
          for (int s = 0; s < mstrips; s++)
            pack_a_strip(ta, A, lda, ib + s * MR, std::min(MR, mb - s * MR), pc, kc, Ap + (size_t)s * MR * kc);
          // Tile shape only changes who computes what, never the arithmetic: shrink tiles until every
          // thread has a few to pick from.
          int ms_per = 24, ns_per = 8;
          auto tiles = [&](int a, int b) { return ((mstrips + a - 1) / a) * ((nstrips + b - 1) / b); };
          while (tiles(ms_per, ns_per) < 4 * nt && (ns_per > 1 || ms_per > 4)) {
            if (ns_per > 1) ns_per /= 2;
            else ms_per /= 2;
          }
          const int mblocks = (mstrips + ms_per - 1) / ms_per, nblocks = (nstrips + ns_per - 1) / ns_per;
#pragma omp for schedule(dynamic, 1)
          for (int t = 0; t < mblocks * nblocks; t++) {
            const int mbk = t % mblocks, nbk = t / mblocks;
            const int s_n0 = nbk * ns_per, s_n1 = std::min(nstrips, s_n0 + ns_per);
            const int s_m0 = mbk * ms_per, s_m1 = std::min(mstrips, s_m0 + ms_per);
            for (int sn = s_n0; sn < s_n1; sn++) {
              const float* bp = Bp + (size_t)sn * NR * kc;
              const int j0 = jc + sn * NR, cols = std::min(NR, N - j0);
              for (int sm = s_m0; sm < s_m1; sm++) {
                const int i0 = ib + sm * MR, rows = std::min(MR, M - i0);
                if (wide) micro_6x32(kc, Ap + (size_t)sm * MR * kc, bp, acc);
                else micro_6x16(kc, Ap + (size_t)sm * MR * kc, bp, acc);
                update_tile(acc, NR, C + (int64_t)i0 * ldc + j0, ldc, rows, cols, alpha, beta, first);
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace rs
