#include <algorithm>
#include <climits>
#include <cmath>
#include <cub/block/block_scan.cuh>

#include "sampling.cuh"
#include "../shared/exp1.h"

namespace rsc {

bool sample_needs_host(const SampleParams& sp, int V) {
  if (!(sp.temperature > 0)) return false;
  return (sp.top_k > 0 && sp.top_k < V) || sp.top_p < 1.0f;
}

namespace {

constexpr int kNT = 1024;

__device__ __forceinline__ void argmax_combine(float& v, int& i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}

__global__ void __launch_bounds__(kNT) sample_kernel(const float* __restrict__ logits, int V, float inv_t, int greedy,
                                                     const double* __restrict__ u, int32_t* __restrict__ tok_out,
                                                     float* __restrict__ slp_out, float* __restrict__ plp_out) {
  using Scan = cub::BlockScan<double, kNT>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ double shd[32];
  __shared__ float shv[32];
  __shared__ int shi[32];
  __shared__ float best_v;
  __shared__ int best_i;
  const int64_t r = blockIdx.x;
  const float* z = logits + r * V;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;

  // Max and first argmax (a thread visits its ids in increasing order; ties go to the lower id).
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = threadIdx.x; i < V; i += kNT) {
    const float v = z[i];
    if (bi == INT_MAX || v > bv) {  // the first id a thread sees always counts (all -inf rows pick id 0, as the CPU)
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) argmax_combine(bv, bi, __shfl_xor_sync(kFull, bv, o), __shfl_xor_sync(kFull, bi, o));
  if (lane == 0) {
    shv[w] = bv;
    shi[w] = bi;
  }
  __syncthreads();
  if (w == 0) {
    bv = lane < kNT / 32 ? shv[lane] : -INFINITY;
    bi = lane < kNT / 32 ? shi[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1) argmax_combine(bv, bi, __shfl_xor_sync(kFull, bv, o), __shfl_xor_sync(kFull, bi, o));
    if (lane == 0) {
      best_v = bv;
      best_i = bi == INT_MAX ? 0 : bi;
    }
  }
  __syncthreads();
  const float zmax = best_v;
  double se = 0.0;
  for (int i = threadIdx.x; i < V; i += kNT) se += (double)expf(z[i] - zmax);
  se = block_sum(se, shd);
  const double lse = (double)zmax + log(se);
  if (greedy) {
    if (threadIdx.x == 0) {
      tok_out[r] = best_i;
      slp_out[r] = 0.f;
      plp_out[r] = (float)((double)z[best_i] - lse);
    }
    return;
  }
  double Z = 0.0;
  for (int i = threadIdx.x; i < V; i += kNT) Z += (double)expf((z[i] - zmax) * inv_t);
  Z = block_sum(Z, shd);
  const double target = u[r] * Z;
  double carry = 0.0;
  int pick = -1;
  for (int c0 = 0; c0 < V; c0 += kNT) {
    const int i = c0 + threadIdx.x;
    const double p = i < V ? (double)expf((z[i] - zmax) * inv_t) : 0.0;
    double incl, agg;
    Scan(scan_tmp).InclusiveSum(p, incl, agg);
    int cand = (i < V && carry + incl > target) ? i : INT_MAX;
    for (int o = 16; o > 0; o >>= 1) cand = min(cand, __shfl_xor_sync(kFull, cand, o));
    __syncthreads();  // scan_tmp and shi are reused below / next round
    if (lane == 0) shi[w] = cand;
    __syncthreads();
    int c = lane < kNT / 32 ? shi[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1) c = min(c, __shfl_xor_sync(kFull, c, o));
    __syncthreads();  // everyone has read shi
    if (c != INT_MAX) {  // block-uniform
      pick = c;
      break;
    }
    carry += agg;
  }
  if (threadIdx.x == 0) {
    if (pick < 0) pick = V - 1;
    // Rounding could land on a zero-probability entry; step back to the last one with mass (as the CPU does).
    while (pick > 0 && expf((z[pick] - zmax) * inv_t) == 0.f) pick--;
    const float pp = expf((z[pick] - zmax) * inv_t);
    tok_out[r] = pick;
    slp_out[r] = (float)log((double)pp / Z);
    plp_out[r] = (float)((double)z[pick] - lse);
  }
}

double row_lse_host(const float* z, int V) {
  float m = -INFINITY;
  for (int i = 0; i < V; i++) m = std::max(m, z[i]);
  double s = 0;
  for (int i = 0; i < V; i++) s += std::exp((double)z[i] - (double)m);
  return (double)m + std::log(s);
}

}  // namespace

void sample_rows_gpu(cudaStream_t s, const float* logits, int n, int V, const SampleParams& sp, const double* u, int32_t* tok, float* slp,
                     float* plp) {
  if (n <= 0) return;
  const bool greedy = !(sp.temperature > 0);
  sample_kernel<<<n, kNT, 0, s>>>(logits, V, greedy ? 1.f : 1.0f / sp.temperature, greedy ? 1 : 0, u, tok, slp, plp);
  check_launch("sample_kernel", s);
}

int32_t sample_token_host(const float* z, int V, const SampleParams& sp, double u, float* sample_logp, float* policy_logp,
                          std::vector<int32_t>& idx, std::vector<float>& p) {
  return rs_shared::sample_token_shared(z, V, sp, u, row_lse_host(z, V), sample_logp, policy_logp, idx, p);
}

}  // namespace rsc
