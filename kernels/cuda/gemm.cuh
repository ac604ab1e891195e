// Matrix products: our own tiled fp32 kernel (the fallback, and the only one generation uses, because each C
// element is one fma chain over k = 0..K-1 whatever M, N or the tile shape, so a row does not depend on the
// other rows of the product), and the dispatcher that prefers cuBLAS (loaded at run time) for the model.
#pragma once
#include "common.cuh"

namespace rsc {

// How the model's matmuls run when cuBLAS is loaded (rs_settings.cuda_matmul; default bf16):
//   FP32: exact fp32 (cuBLAS CUBLAS_COMPUTE_32F), what the checks compare at 1e-5;
//   TF32: fp32 in and out, tensor cores with TF32 inputs;
//   BF16: operands rounded to bf16 (weights from a bf16 copy refreshed after every update), fp32 accumulate
//         and output; master weights, grads, AdamW moments and activations stay fp32.
// The stand-alone layer kernels always use FP32.
enum class MathMode { FP32 = 0, TF32 = 1, BF16 = 2 };
const char* math_mode_name(MathMode m);
// rs_settings.cuda_matmul (an rs_cuda_matmul value, checked by the caller), read by every rs_model_create.
void set_matmul_setting(int32_t cuda_matmul);
// The mode a model created now runs: the setting, or by default bf16 when it has a cuBLAS handle, else fp32.
MathMode model_math_mode(bool have_cublas);

struct GemmCtx {
  cudaStream_t stream = nullptr;
  void* cublas = nullptr;  // null: own kernels only
  MathMode mode = MathMode::FP32;
  DevBuf<bf16> scratch_a, scratch_b;  // bf16 copies of activation operands (BF16 mode)
};

// Row-major C[M,N] = alpha op(A) op(B) + beta C (C is not read when beta == 0). Exactly one of B (fp32) and Bh
// (bf16) is used: Bh when it is not null.
void gemm_own(cudaStream_t s, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
              const bf16* Bh, int ldb, float beta, float* C, int ldc);

// The model's product. Bh: the bf16 copy of B (a weight, same layout and ldb) or null. row_independent forces
// our own kernel (generation).
void gemm(GemmCtx& g, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, const bf16* Bh,
          int ldb, float beta, float* C, int ldc, bool row_independent, const char* what);

// HF linear layers: y = x W^T (+ b), W [out, in]; dx = dy W (+ beta dx); dW += dy^T x.
void linear_fwd(GemmCtx& g, const float* x, int N, int in, const float* W, const bf16* Wh, int out, const float* b, float* y,
                bool row_independent, const char* what);
void linear_bwd_dx(GemmCtx& g, const float* dy, int N, int out, const float* W, const bf16* Wh, int in, float beta, float* dx,
                   const char* what);
void linear_bwd_dw(GemmCtx& g, const float* dy, const float* x, int N, int in, int out, float* dW, const char* what);

// y[r, :] += b for N rows of width `out` and row stride ld.
void add_bias(cudaStream_t s, float* y, int N, int out, int ld, const float* b);
// out[j] += sum_r X[r * ld + j] over N rows, in fixed 128-row chunks added in chunk order (deterministic).
// part: scratch, grown as needed.
void colsum_accumulate(cudaStream_t s, const float* X, int N, int cols, int ld, float* out, DevBuf<float>& part);

// dst[i] = bf16(src[i]) (round to nearest even).
void to_bf16(cudaStream_t s, const float* src, int64_t n, bf16* dst);

}  // namespace rsc
