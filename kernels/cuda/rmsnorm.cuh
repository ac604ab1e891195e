// RMSNorm (HF order: y = w * (x * rstd)), the fused residual-add form, and their backward. One block per row.
#pragma once
#include "common.cuh"

namespace rsc {

// y = rmsnorm(x); with res != null: r_out = x + res first and y = rmsnorm(r_out).
void rmsnorm_fwd(cudaStream_t s, const float* x, const float* res, const float* w, int T, int D, float eps, float* r_out, float* y,
                 float* rstd);
// dx = dr_in (may be null; may alias dx) + d(rmsnorm)/dx . dy; dw += sum_t dy * x * rstd (null: skipped), in fixed
// 128-row chunks added in order. part: scratch.
void rmsnorm_bwd(cudaStream_t s, const float* dy, const float* x, const float* w, const float* rstd, int T, int D, const float* dr_in,
                 float* dx, float* dw, DevBuf<float>& part);

}  // namespace rsc
