#include <algorithm>

#include "rmsnorm.cuh"

namespace rsc {

namespace {

constexpr int kNT = 256, kChunkRows = 128;

__global__ void __launch_bounds__(kNT) rmsnorm_fwd_kernel(const float* __restrict__ x, const float* __restrict__ res,
                                                          const float* __restrict__ w, int D, float eps, float* r_out,
                                                          float* __restrict__ y, float* __restrict__ rstd) {
  __shared__ float sh[32];
  const int64_t t = blockIdx.x;
  const float* xr = x + t * D;
  float* rr = res ? r_out + t * D : nullptr;
  float ss = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float v = xr[i];
    if (res) {
      v = __fadd_rn(v, res[t * D + i]);
      rr[i] = v;
    }
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss, sh);
  const float r = 1.0f / sqrtf(ss / (float)D + eps);
  if (threadIdx.x == 0) rstd[t] = r;
  float* yr = y + t * D;
  // Each thread reads back only the r_out elements it wrote itself: no barrier needed.
  for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = __fmul_rn(w[i], __fmul_rn(res ? rr[i] : xr[i], r));
}

__global__ void __launch_bounds__(kNT) rmsnorm_bwd_dx_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                                             const float* __restrict__ w, const float* __restrict__ rstd, int D,
                                                             const float* dr_in, float* dx) {
  __shared__ float sh[32];
  const int64_t t = blockIdx.x;
  const float* dyr = dy + t * D;
  const float* xr = x + t * D;
  const float r = rstd[t];
  float dot = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) dot = fmaf(__fmul_rn(dyr[i], w[i]), xr[i], dot);
  dot = block_sum(dot, sh);
  const float coef = dot / (float)D * r * r * r;
  float* dxr = dx + t * D;
  const float* din = dr_in ? dr_in + t * D : nullptr;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    const float g = __fmul_rn(dyr[i], w[i]);
    const float v = __fsub_rn(__fmul_rn(r, g), __fmul_rn(xr[i], coef));
    dxr[i] = din ? __fadd_rn(din[i], v) : v;
  }
}

__global__ void rmsnorm_dw_partial_kernel(const float* __restrict__ dy, const float* __restrict__ x, const float* __restrict__ rstd,
                                          int T, int D, float* __restrict__ part) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, c = blockIdx.y;
  if (i >= D) return;
  const int t1 = min(T, (c + 1) * kChunkRows);
  float p = 0.f;
  for (int t = c * kChunkRows; t < t1; t++) p = fmaf(dy[(int64_t)t * D + i], __fmul_rn(x[(int64_t)t * D + i], rstd[t]), p);
  part[(int64_t)c * D + i] = p;
}

__global__ void rmsnorm_dw_finish_kernel(const float* __restrict__ part, int chunks, int D, float* __restrict__ dw) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= D) return;
  float s = dw[i];
  for (int c = 0; c < chunks; c++) s += part[(int64_t)c * D + i];
  dw[i] = s;
}

}  // namespace

void rmsnorm_fwd(cudaStream_t s, const float* x, const float* res, const float* w, int T, int D, float eps, float* r_out, float* y,
                 float* rstd) {
  if (T <= 0) return;
  rmsnorm_fwd_kernel<<<T, kNT, 0, s>>>(x, res, w, D, eps, r_out, y, rstd);
  check_launch(res ? "residual_rmsnorm_fwd_kernel" : "rmsnorm_fwd_kernel", s);
}

void rmsnorm_bwd(cudaStream_t s, const float* dy, const float* x, const float* w, const float* rstd, int T, int D, const float* dr_in,
                 float* dx, float* dw, DevBuf<float>& part) {
  if (T <= 0) return;
  // dw first: it reads dy and x, which dx may alias in a caller's buffer layout.
  if (dw) {
    const int chunks = (T + kChunkRows - 1) / kChunkRows;
    if (chunks > 65535) raise(RS_ERR_UNSUPPORTED, "rmsnorm backward: %d rows is too many", T);
    part.reserve((size_t)chunks * D, "rmsnorm dw scratch");
    rmsnorm_dw_partial_kernel<<<dim3(grid_for(D, 128), chunks), 128, 0, s>>>(dy, x, rstd, T, D, part.p);
    check_launch("rmsnorm_dw_partial_kernel", s);
    rmsnorm_dw_finish_kernel<<<grid_for(D, 128), 128, 0, s>>>(part.p, chunks, D, dw);
    check_launch("rmsnorm_dw_finish_kernel", s);
  }
  rmsnorm_bwd_dx_kernel<<<T, kNT, 0, s>>>(dy, x, w, rstd, D, dr_in, dx);
  check_launch("rmsnorm_bwd_dx_kernel", s);
}

}  // namespace rsc

// --------------------------------------------------------------------------------------- ABI entry points
using namespace rsc;

namespace {
int32_t check_norm(const char* what, int32_t T, int32_t D, rs_error* err) {
  if (T < 1 || D < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: sizes must be positive (T=%d D=%d)", what, T, D);
  return RS_OK;
}

// Shared body of the two forwards (res == null: plain RMSNorm).
void norm_fwd_call(const float* x, const float* res, const float* w, int32_t T, int32_t D, float eps, float* r, float* y, float* rstd) {
  require_device();
  cudaStream_t s = thread_stream();
  const size_t n = (size_t)T * D;
  DevBuf<float> dx, dres, dw, dr, dy, drs;
  upload(dx, x, n, s, "rmsnorm x");
  upload(dres, res, n, s, "rmsnorm residual");
  upload(dw, w, (size_t)D, s, "rmsnorm w");
  if (res) dr.reserve(n, "rmsnorm r");
  dy.reserve(n, "rmsnorm y");
  drs.reserve((size_t)T, "rmsnorm rstd");
  rmsnorm_fwd(s, dx.p, dres.p, dw.p, T, D, eps, dr.p, dy.p, drs.p);
  if (res) to_host(r, dr.p, n * sizeof(float), s, "rmsnorm r");
  to_host(y, dy.p, n * sizeof(float), s, "rmsnorm y");
  to_host(rstd, drs.p, (size_t)T * sizeof(float), s, "rmsnorm rstd");
}

void norm_bwd_call(const float* dy, const float* dr_in, const float* x, const float* w, const float* rstd, int32_t T, int32_t D, float* dx,
                   float* dw) {
  require_device();
  cudaStream_t s = thread_stream();
  const size_t n = (size_t)T * D;
  DevBuf<float> ddy, ddr, dxin, dwt, drs, ddx, ddw, part;
  upload(ddy, dy, n, s, "rmsnorm dy");
  upload(ddr, dr_in, n, s, "rmsnorm dr_in");
  upload(dxin, x, n, s, "rmsnorm x");
  upload(dwt, w, (size_t)D, s, "rmsnorm w");
  upload(drs, rstd, (size_t)T, s, "rmsnorm rstd");
  upload(ddw, dw, (size_t)D, s, "rmsnorm dw");
  ddx.reserve(n, "rmsnorm dx");
  rmsnorm_bwd(s, ddy.p, dxin.p, dwt.p, drs.p, T, D, ddr.p, ddx.p, ddw.p, part);
  to_host(dx, ddx.p, n * sizeof(float), s, "rmsnorm dx");
  if (dw) to_host(dw, ddw.p, (size_t)D * sizeof(float), s, "rmsnorm dw");
}
}  // namespace

extern "C" {

int32_t rs_rmsnorm_fwd(const float* x, const float* w, int32_t T, int32_t D, float eps, float* y, float* rstd, rs_error* err) {
  if (int32_t st = check_norm("rmsnorm_fwd", T, D, err)) return st;
  if (!x || !w || !y || !rstd) return fail(err, RS_ERR_INVALID_ARGUMENT, "rmsnorm_fwd: null buffer");
  if (!(eps >= 0.f)) return fail(err, RS_ERR_INVALID_ARGUMENT, "rmsnorm_fwd: eps must be >= 0");
  return guard(err, "rmsnorm_fwd", [&] { norm_fwd_call(x, nullptr, w, T, D, eps, nullptr, y, rstd); });
}

int32_t rs_rmsnorm_bwd(const float* dy, const float* x, const float* w, const float* rstd, int32_t T, int32_t D, float* dx, float* dw,
                       rs_error* err) {
  if (int32_t st = check_norm("rmsnorm_bwd", T, D, err)) return st;
  if (!dy || !x || !w || !rstd || !dx) return fail(err, RS_ERR_INVALID_ARGUMENT, "rmsnorm_bwd: null buffer");
  return guard(err, "rmsnorm_bwd", [&] { norm_bwd_call(dy, nullptr, x, w, rstd, T, D, dx, dw); });
}

int32_t rs_residual_rmsnorm_fwd(const float* x, const float* residual, const float* w, int32_t T, int32_t D, float eps, float* r, float* y,
                                float* rstd, rs_error* err) {
  if (int32_t st = check_norm("residual_rmsnorm_fwd", T, D, err)) return st;
  if (!x || !residual || !w || !r || !y || !rstd) return fail(err, RS_ERR_INVALID_ARGUMENT, "residual_rmsnorm_fwd: null buffer");
  if (!(eps >= 0.f)) return fail(err, RS_ERR_INVALID_ARGUMENT, "residual_rmsnorm_fwd: eps must be >= 0");
  return guard(err, "residual_rmsnorm_fwd", [&] { norm_fwd_call(x, residual, w, T, D, eps, r, y, rstd); });
}

int32_t rs_residual_rmsnorm_bwd(const float* dy, const float* dr_in, const float* r, const float* w, const float* rstd, int32_t T, int32_t D,
                                float* dx, float* dw, rs_error* err) {
  if (int32_t st = check_norm("residual_rmsnorm_bwd", T, D, err)) return st;
  if (!dy || !r || !w || !rstd || !dx) return fail(err, RS_ERR_INVALID_ARGUMENT, "residual_rmsnorm_bwd: null buffer");
  return guard(err, "residual_rmsnorm_bwd", [&] { norm_bwd_call(dy, dr_in, r, w, rstd, T, D, dx, dw); });
}

}  // extern "C"
