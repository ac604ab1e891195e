// Per-head RMSNorm of q and k (Qwen3's q_norm / k_norm), the GPU twin of cpu/qk_norm.cpp: every head vector of
// hd values inside a q|k|v row is normalised with its own rstd and scaled by one weight of hd shared by all
// heads, before RoPE. One warp per head vector.
#pragma once
#include "common.cuh"

namespace rsc {

// In place on n_heads head vectors of hd from column 0 of rows x [T, ld]. raw (stride ld_raw) receives the
// input and rstd (stride ld_rstd) each head's 1/rms, when not null.
void head_rmsnorm_fwd(cudaStream_t s, float* x, int T, int ld, int n_heads, int hd, const float* w, float eps, float* raw, int ld_raw,
                      float* rstd, int ld_rstd);
// g: the output's gradient in, the input's gradient out (in place). dw += the sum over tokens and heads, in
// fixed 64-token chunks added in order. part: scratch.
void head_rmsnorm_bwd(cudaStream_t s, float* g, int T, int ld, int n_heads, int hd, const float* w, const float* raw, int ld_raw,
                      const float* rstd, int ld_rstd, float* dw, DevBuf<float>& part);

}  // namespace rsc
