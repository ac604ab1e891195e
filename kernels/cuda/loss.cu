#include <cmath>

#include "loss.cuh"
#include "../shared/loss_token.h"

namespace rsc {

namespace {

constexpr int kNT = 512;

__global__ void __launch_bounds__(kNT)
    loss_kernel(const float* logits, int V, const int32_t* __restrict__ targets, const uint8_t* __restrict__ mask,
                const float* __restrict__ adv, const float* __restrict__ slp, rs_loss_spec spec, float* dlogits,
                float* __restrict__ token_logp, double* __restrict__ row_out) {
  __shared__ double shd[32];
  __shared__ float shf[32];
  __shared__ float g_sh;
  const int64_t r = blockIdx.x;
  const float* z = logits + r * V;  // may alias dz: each element is read before it is written, by the same thread
  float* dz = dlogits ? dlogits + r * V : nullptr;
  double* o = row_out + r * kLossRowOut;
  if (!mask[r]) {
    if (dz)
      for (int i = threadIdx.x; i < V; i += blockDim.x) dz[i] = 0.f;
    if (threadIdx.x < kLossRowOut) o[threadIdx.x] = 0.0;
    if (threadIdx.x == 0 && token_logp) token_logp[r] = 0.f;
    return;
  }
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, z[i]);
  mx = block_max(mx, shf);
  double s = 0.0, w = 0.0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float zi = z[i];
    const float e = expf(zi - mx);
    s += e;
    w += (double)e * zi;
  }
  s = block_sum(s, shd);
  w = block_sum(w, shd);
  const double lse = (double)mx + log(s);
  if (threadIdx.x == 0) {
    const int tgt = targets[r];
    const double logp = (double)z[tgt] - lse;
    const rs_shared::LossToken t = rs_shared::loss_token(spec, logp, slp ? (double)slp[r] : 0.0, adv ? (double)adv[r] : 0.0, 1.0 / spec.normalizer);
    o[0] = t.loss;
    o[1] = lse - w / s;  // entropy of the full softmax
    o[2] = t.k3;
    o[3] = logp;
    o[4] = t.ratio;
    o[5] = 1.0;
    o[6] = t.masked ? 1.0 : 0.0;
    o[7] = 0.0;
    if (token_logp) token_logp[r] = (float)logp;
    g_sh = (float)t.g;
  }
  __syncthreads();  // g_sh ready; thread 0 has read z[tgt]
  if (!dz) return;
  const float g = g_sh;
  if (g == 0.f) {
    for (int i = threadIdx.x; i < V; i += blockDim.x) dz[i] = 0.f;
    return;
  }
  const float lse_f = (float)lse, ng = -g;
  for (int i = threadIdx.x; i < V; i += blockDim.x) dz[i] = ng * expf(z[i] - lse_f);
  __syncthreads();
  if (threadIdx.x == 0) dz[targets[r]] += g;
}

}  // namespace


void loss_rows(cudaStream_t s, const float* logits, int N, int V, const int32_t* targets, const uint8_t* mask, const float* adv,
               const float* slp, const rs_loss_spec& spec, float* dlogits, float* token_logp, double* row_out) {
  if (N <= 0) return;
  loss_kernel<<<N, kNT, 0, s>>>(logits, V, targets, mask, adv, slp, spec, dlogits, token_logp, row_out);
  check_launch("loss_kernel", s);
}

void loss_accumulate(const double* row_out, int N, rs_loss_stats* stats) {
  for (int r = 0; r < N; r++) {
    const double* o = row_out + (size_t)r * kLossRowOut;
    if (o[5] == 0.0) continue;
    stats->loss += o[0];
    stats->loss_tokens += 1;
    stats->masked_tokens += o[6];
    stats->entropy_sum += o[1];
    stats->mismatch_kl_sum += o[2];
    stats->logp_sum += o[3];
    stats->ratio_sum += o[4];
  }
}

}  // namespace rsc

using namespace rsc;

extern "C" {

int32_t rs_loss_fwd_bwd(const float* logits, int32_t N, int32_t V, const int32_t* targets, const uint8_t* mask, const float* advantages,
                        const float* sampler_logp, const rs_loss_spec* spec, float* dlogits, float* token_logp, rs_loss_stats* stats,
                        rs_error* err) {
  if (int32_t st = rs_shared::check_loss_call(logits, N, V, targets, mask, advantages, sampler_logp, spec, stats, err)) return st;
  const bool policy = rs_shared::loss_uses_policy(spec->kind);
  return guard(err, "loss", [&] {
    require_device();
    cudaStream_t s = thread_stream();
    DevBuf<float> z, a, sl, lp;
    DevBuf<int32_t> t;
    DevBuf<uint8_t> mk;
    DevBuf<double> ro;
    upload(z, logits, (size_t)N * V, s, "loss logits");
    upload(t, targets, (size_t)N, s, "loss targets");
    upload(mk, mask, (size_t)N, s, "loss mask");
    if (policy) {
      upload(a, advantages, (size_t)N, s, "loss advantages");
      upload(sl, sampler_logp, (size_t)N, s, "loss sampler logprobs");
    }
    lp.reserve((size_t)N, "loss token logprobs");
    ro.reserve((size_t)N * kLossRowOut, "loss row results");
    loss_rows(s, z.p, N, V, t.p, mk.p, a.p, sl.p, *spec, dlogits ? z.p : nullptr, lp.p, ro.p);
    std::vector<double> rows((size_t)N * kLossRowOut);
    to_host(rows.data(), ro.p, rows.size() * sizeof(double), s, "loss row results");
    if (dlogits) to_host(dlogits, z.p, sizeof(float) * (size_t)N * V, s, "loss dlogits");
    if (token_logp) to_host(token_logp, lp.p, sizeof(float) * (size_t)N, s, "loss token logprobs");
    *stats = rs_loss_stats{};
    loss_accumulate(rows.data(), N, stats);
  });
}

}  // extern "C"
