// Optional OpenBLAS, found with dlopen() at first use and never linked at build time, so the library loads (and
// stays correct) on machines without it. Loading checks the core OpenBLAS picked against the CPU's vector units
// and reloads it with OPENBLAS_CORETYPE when it picked slower kernels than the CPU can run (blas_coretype.h).
// Whether a product then goes to OpenBLAS or to our own sgemm is gemm_router.h's decision, never assumed.
// rs_settings.blas_mode off before the first use: never load it; on: every product of at least 2^19 multiply-adds to
// it, unmeasured.
#pragma once
#include <string>

namespace rs::blas {

enum class Mode : int { Auto = 0, Off = 1, On = 2 };

// The library is loaded, whatever the mode.
bool loaded();
// Loaded and not switched off: products may go to it (explicitly, or as gemm_router.h decides).
bool available();
Mode mode();
// "auto", "off" or "on".
const char* mode_name();
// 0 = auto (measured routing), 1 = off, 2 = on (rs_settings.blas_mode).
void set_mode(int mode);
// rs_settings.blas_lib ("" = the usual names), read at the first load. Refused (false, *why set) once the library was
// loaded from another path.
bool set_lib(const std::string& path, std::string* why);
// Test hook (rs_test_hooks.blas_detected_core): the first load pretends OpenBLAS detected this core ("" = none).
void set_test_detected_core(const std::string& core);
// The library as loaded: "openblas (<file>) <config>, core <name> (<how the core was chosen>)", or "none (<why>)".
// Stable for a machine and library build: replay compares it with the run's.
std::string describe();
// This CPU's widest usable vector unit (blas_coretype.h SimdLevel).
int cpu_simd_level();
// Row-major C = alpha op(A) op(B) + beta C on `threads` OpenBLAS threads. Requires loaded().
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc, int threads);

}  // namespace rs::blas
