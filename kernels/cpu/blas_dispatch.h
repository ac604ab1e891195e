// Optional OpenBLAS, found with dlopen() at first use and never linked at build time, so the library
// loads (and stays correct) on machines without it. ROLLSTREAM_BLAS=off forces our own sgemm.
#pragma once
#include <string>

namespace rs::blas {

bool available();
// "openblas <version/config>" or "none (<why>)".
std::string describe();
// 0 = use when loadable, 1 = never. Returns available().
bool set_mode(int mode);
// Row-major C = alpha op(A) op(B) + beta C on `threads` OpenBLAS threads. Requires available().
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc, int threads);

}  // namespace rs::blas
