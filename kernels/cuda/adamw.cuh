// Gradient norm (fixed 64K-element chunks summed in double on the device, chunk sums added in order on the
// host: deterministic) and PyTorch's AdamW written with explicitly rounded operations in the CPU backend's
// order, so for the same inputs it gives the CPU backend's bits.
#pragma once
#include <vector>

#include "common.cuh"

namespace rsc {

double grad_sumsq(cudaStream_t s, const float* g, int64_t n, DevBuf<double>& part, std::vector<double>& host_part);
void adamw(cudaStream_t s, float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps, float wd,
           int64_t step, float grad_scale);
int32_t check_adamw_args(float lr, float b1, float b2, float eps, float wd, int64_t step, rs_error* err);

}  // namespace rsc
