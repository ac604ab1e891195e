// Matrix products: our own packed AVX2/AVX-512 sgemm (the fallback, and the only one generation uses, since
// its rows do not depend on the other rows), and gemm(), which runs a product on it or on OpenBLAS.
#pragma once
#include <cstdint>

namespace rs {

enum class GemmImpl { Auto = 0, Own = 1, Blas = 2 };

// Row-major C[M,N] = alpha op(A) op(B) + beta C. Each C element is accumulated over k in a fixed order that
// depends only on K, so results do not depend on the thread count or on M/N (a row's values are the same
// whatever other rows are in the product).
void sgemm_own(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc, int threads);

// Whether sgemm_own runs its AVX-512 micro-kernel (CPU support, unless rs_settings.simd_level forces AVX2). Both
// kernels give identical bits; forcing AVX2 exists so tests can check that.
bool sgemm_uses_avx512();
void sgemm_force_avx2(bool force);

// Own / Blas: that kernel (Blas requires blas::loaded()). Auto: whichever gemm_router.h measured faster for the
// product's shape class (defined in gemm_router.cpp).
void gemm(GemmImpl impl, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc, int threads);

}  // namespace rs
