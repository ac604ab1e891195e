// cuBLAS, found with dlopen() at first use and never linked at build time: the library builds without the
// cuBLAS headers or libraries, loads on machines without them, and then runs our own gemm kernels.
// Search order: rs_settings.cublas_lib (a path), then libcublas.so.13 / .12 / .11 / libcublas.so on the loader
// path (a process that imported torch already has one loaded, which dlopen() returns).
// rs_settings.blas_mode off disables it, as on the CPU backend (and, set before the first use, it is never loaded).
#pragma once
#include <string>

#include "common.cuh"

namespace rsc::cublas {

bool available();
// "cublas <version> (<file>)" or "none (<why>)".
std::string describe();
// 0 = use when loadable (default), 1 = never.
void set_mode(int mode);
// rs_settings.cublas_lib ("" = the loader path's names), read at the first load. Refused (false, *why set) once
// cuBLAS was loaded with another.
bool set_lib(const std::string& path, std::string* why);

// A cuBLAS handle bound to stream s (throws Failure when cuBLAS is unavailable or creation fails).
void* create_handle(cudaStream_t s);
void destroy_handle(void* h);
// The calling thread's handle for the stand-alone kernels, bound to s.
void* thread_handle(cudaStream_t s);

// cudaDataType / cublasComputeType_t values (library_types.h, cublas_api.h): fixed by the CUDA ABI.
constexpr int kR32F = 0, kR16BF = 14;
constexpr int kCompute32F = 68, kCompute32FFastTF32 = 77;

// Row-major C[M,N] = alpha op(A) op(B) + beta C through cublasGemmEx (column-major, so it computes
// C^T = op(B)^T op(A)^T). a_type / b_type: kR32F or kR16BF; C is always fp32; compute: kCompute32F (exact
// fp32) or kCompute32FFastTF32. `what` names the caller in errors.
void gemm(void* handle, bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int a_type, int lda, const void* B,
          int b_type, int ldb, float beta, float* C, int ldc, int compute, const char* what);

}  // namespace rsc::cublas
