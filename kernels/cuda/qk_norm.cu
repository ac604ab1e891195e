// Per-head q/k RMSNorm (see qk_norm.cuh): forward in place, backward with a thread-count independent dw.
#include <algorithm>

#include "qk_norm.cuh"

namespace rsc {

namespace {

constexpr int kWarps = 4, kChunkRows = 64;

__global__ void __launch_bounds__(32 * kWarps) head_norm_fwd_kernel(float* x, int T, int ld, int n_heads, int hd, const float* __restrict__ w,
                                                                   float eps, float* raw, int ld_raw, float* rstd, int ld_rstd) {
  const int64_t head = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (head >= (int64_t)T * n_heads) return;  // whole warps leave together
  const int t = (int)(head / n_heads), h = (int)(head % n_heads);
  float* v = x + (int64_t)t * ld + (int64_t)h * hd;
  float ss = 0.f;
  for (int i = lane; i < hd; i += 32) ss = fmaf(v[i], v[i], ss);
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / (float)hd + eps);
  if (rstd && lane == 0) rstd[(int64_t)t * ld_rstd + h] = r;
  float* rw = raw ? raw + (int64_t)t * ld_raw + (int64_t)h * hd : nullptr;
  for (int i = lane; i < hd; i += 32) {
    const float xi = v[i];
    if (rw) rw[i] = xi;
    v[i] = __fmul_rn(w[i], __fmul_rn(xi, r));
  }
}

__global__ void __launch_bounds__(32 * kWarps) head_norm_bwd_dx_kernel(float* g, int T, int ld, int n_heads, int hd, const float* __restrict__ w,
                                                                      const float* __restrict__ raw, int ld_raw, const float* __restrict__ rstd,
                                                                      int ld_rstd) {
  const int64_t head = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (head >= (int64_t)T * n_heads) return;
  const int t = (int)(head / n_heads), h = (int)(head % n_heads);
  float* dy = g + (int64_t)t * ld + (int64_t)h * hd;
  const float* x = raw + (int64_t)t * ld_raw + (int64_t)h * hd;
  const float r = rstd[(int64_t)t * ld_rstd + h];
  float dot = 0.f;
  for (int i = lane; i < hd; i += 32) dot = fmaf(__fmul_rn(dy[i], w[i]), x[i], dot);
  dot = warp_sum(dot);
  const float coef = dot / (float)hd * r * r * r;
  // Each lane rewrites only the elements it read: no barrier needed.
  for (int i = lane; i < hd; i += 32) dy[i] = __fsub_rn(__fmul_rn(r, __fmul_rn(dy[i], w[i])), __fmul_rn(x[i], coef));
}

__global__ void head_norm_dw_partial_kernel(const float* __restrict__ g, int T, int ld, int n_heads, int hd, const float* __restrict__ raw,
                                            int ld_raw, const float* __restrict__ rstd, int ld_rstd, float* __restrict__ part) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, c = blockIdx.y;
  if (i >= hd) return;
  const int t1 = min(T, (c + 1) * kChunkRows);
  float p = 0.f;
  for (int t = c * kChunkRows; t < t1; t++)
    for (int h = 0; h < n_heads; h++)
      p = fmaf(g[(int64_t)t * ld + (int64_t)h * hd + i], __fmul_rn(raw[(int64_t)t * ld_raw + (int64_t)h * hd + i], rstd[(int64_t)t * ld_rstd + h]), p);
  part[(int64_t)c * hd + i] = p;
}

__global__ void head_norm_dw_finish_kernel(const float* __restrict__ part, int chunks, int hd, float* __restrict__ dw) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= hd) return;
  float s = dw[i];
  for (int c = 0; c < chunks; c++) s += part[(int64_t)c * hd + i];
  dw[i] = s;
}

}  // namespace

void head_rmsnorm_fwd(cudaStream_t s, float* x, int T, int ld, int n_heads, int hd, const float* w, float eps, float* raw, int ld_raw,
                      float* rstd, int ld_rstd) {
  if (T <= 0) return;
  head_norm_fwd_kernel<<<grid_for((int64_t)T * n_heads, kWarps), 32 * kWarps, 0, s>>>(x, T, ld, n_heads, hd, w, eps, raw, ld_raw, rstd,
                                                                                      ld_rstd);
  check_launch("head_norm_fwd_kernel", s);
}

void head_rmsnorm_bwd(cudaStream_t s, float* g, int T, int ld, int n_heads, int hd, const float* w, const float* raw, int ld_raw,
                      const float* rstd, int ld_rstd, float* dw, DevBuf<float>& part) {
  if (T <= 0) return;
  // dw first: the dx kernel overwrites the output gradient it reads.
  const int chunks = (T + kChunkRows - 1) / kChunkRows;
  if (chunks > 65535) raise(RS_ERR_UNSUPPORTED, "q/k norm backward: %d rows is too many", T);
  part.reserve((size_t)chunks * hd, "q/k norm dw scratch");
  head_norm_dw_partial_kernel<<<dim3(grid_for(hd, 128), chunks), 128, 0, s>>>(g, T, ld, n_heads, hd, raw, ld_raw, rstd, ld_rstd, part.p);
  check_launch("head_norm_dw_partial_kernel", s);
  head_norm_dw_finish_kernel<<<grid_for(hd, 128), 128, 0, s>>>(part.p, chunks, hd, dw);
  check_launch("head_norm_dw_finish_kernel", s);
  head_norm_bwd_dx_kernel<<<grid_for((int64_t)T * n_heads, kWarps), 32 * kWarps, 0, s>>>(g, T, ld, n_heads, hd, w, raw, ld_raw, rstd, ld_rstd);
  check_launch("head_norm_bwd_dx_kernel", s);
}

}  // namespace rsc
