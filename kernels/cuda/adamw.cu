#include <algorithm>
#include <cmath>

#include "adamw.cuh"

namespace rsc {

namespace {

constexpr int64_t kChunk = 1 << 16;
constexpr int kNT = 256;

__global__ void __launch_bounds__(kNT) sumsq_kernel(const float* __restrict__ g, int64_t n, double* __restrict__ part) {
  __shared__ double sh[32];
  const int64_t i0 = blockIdx.x * kChunk, i1 = min(n, i0 + kChunk);
  double s = 0.0;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    const double x = g[i];
    s = fma(x, x, s);
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v, int64_t n,
                             float b1, float b2, float eps, float decay, float step_size, float inv_sqrt_bc2, float grad_scale) {
  const float c1 = __fsub_rn(1.0f, b1), c2 = __fsub_rn(1.0f, b2);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float gi = __fmul_rn(g[i], grad_scale);
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(c1, gi));
    const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(c2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), inv_sqrt_bc2), eps);
    p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(step_size, __fdiv_rn(mi, denom)));
  }
}

}  // namespace

double grad_sumsq(cudaStream_t s, const float* g, int64_t n, DevBuf<double>& part, std::vector<double>& host) {
  if (n <= 0) return 0.0;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  part.reserve((size_t)chunks, "grad-norm partial sums");
  sumsq_kernel<<<(unsigned)chunks, kNT, 0, s>>>(g, n, part.p);
  check_launch("sumsq_kernel", s);
  host.resize((size_t)chunks);
  to_host(host.data(), part.p, sizeof(double) * (size_t)chunks, s, "grad-norm partial sums");
  double total = 0.0;
  for (double x : host) total += x;
  return total;
}

void adamw(cudaStream_t s, float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps, float wd,
           int64_t step, float grad_scale) {
  if (n <= 0) return;
  // The scalar set-up exactly as the CPU backend computes it.
  const double bc1 = 1.0 - std::pow((double)b1, (double)step);
  const double bc2 = 1.0 - std::pow((double)b2, (double)step);
  const float step_size = (float)(lr / bc1);
  const float inv_sqrt_bc2 = (float)(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - lr * wd;
  const unsigned blocks = (unsigned)std::min<int64_t>(grid_for(n, kNT), 65535LL * 16);
  adamw_kernel<<<blocks, kNT, 0, s>>>(p, g, m, v, n, b1, b2, eps, decay, step_size, inv_sqrt_bc2, grad_scale);
  check_launch("adamw_kernel", s);
}

int32_t check_adamw_args(float lr, float b1, float b2, float eps, float wd, int64_t step, rs_error* err) {
  if (step < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "adamw: step must be >= 1 (got %lld)", (long long)step);
  if (!(lr >= 0) || !std::isfinite(lr)) return fail(err, RS_ERR_INVALID_ARGUMENT, "adamw: lr must be a finite number >= 0");
  if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) return fail(err, RS_ERR_INVALID_ARGUMENT, "adamw: betas must be in [0, 1)");
  if (!(eps > 0) || !(wd >= 0)) return fail(err, RS_ERR_INVALID_ARGUMENT, "adamw: need eps > 0 and weight decay >= 0");
  return RS_OK;
}

}  // namespace rsc

using namespace rsc;

extern "C" {

int32_t rs_grad_norm(const float* g, int64_t n, double* out, rs_error* err) {
  if (n < 0 || (n > 0 && !g) || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "grad_norm: bad buffer");
  return guard(err, "grad_norm", [&] {
    require_device();
    cudaStream_t s = thread_stream();
    DevBuf<float> dg;
    DevBuf<double> part;
    std::vector<double> host;
    upload(dg, g, (size_t)n, s, "grad_norm g");
    *out = std::sqrt(grad_sumsq(s, dg.p, n, part, host));
  });
}

int32_t rs_adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps, float wd, int64_t step,
                 float grad_scale, rs_error* err) {
  if (n < 0 || (n > 0 && (!p || !g || !m || !v))) return fail(err, RS_ERR_INVALID_ARGUMENT, "adamw: bad buffer");
  if (int32_t st = check_adamw_args(lr, b1, b2, eps, wd, step, err)) return st;
  return guard(err, "adamw", [&] {
    require_device();
    if (n == 0) return;
    cudaStream_t s = thread_stream();
    DevBuf<float> dp, dg, dm, dv;
    upload(dp, (const float*)p, (size_t)n, s, "adamw p");
    upload(dg, g, (size_t)n, s, "adamw g");
    upload(dm, (const float*)m, (size_t)n, s, "adamw m");
    upload(dv, (const float*)v, (size_t)n, s, "adamw v");
    adamw(s, dp.p, dg.p, dm.p, dv.p, n, lr, b1, b2, eps, wd, step, grad_scale);
    to_host(p, dp.p, sizeof(float) * (size_t)n, s, "adamw p");
    to_host(m, dm.p, sizeof(float) * (size_t)n, s, "adamw m");
    to_host(v, dv.p, sizeof(float) * (size_t)n, s, "adamw v");
  });
}

}  // extern "C"
