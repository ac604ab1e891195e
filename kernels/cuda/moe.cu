// Mixture-of-experts block, forward and backward on the GPU (see moe.cuh). Sums over a token's picks run in pick
// order and each expert's weight gradients accumulate expert by expert, as on the CPU backend.
#include <algorithm>

#include "moe.cuh"
#include "model.cuh"
#include "../shared/moe_route.h"

namespace rsc {

namespace {

constexpr int kNT = 256;

// out[t] = sum_k w[t, k] y[slot[t, k]] in pick order (w null: weight 1), plus add[t] when add is not null.
__global__ void moe_combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ slot, const float* __restrict__ w, int K, int D,
                                   const float* __restrict__ add, float* __restrict__ out) {
  const int t = blockIdx.x;
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    float acc = 0.f;
    for (int k = 0; k < K; k++) {
      const int i = t * K + k;
      acc = fmaf(w ? w[i] : 1.f, y[(int64_t)slot[i] * D + j], acc);
    }
    if (add) acc += add[(int64_t)t * D + j];
    out[(int64_t)t * D + j] = acc;
  }
}

// Per pick i of token t = i / K: dy[slot[i]] = w[i] g[t] and dw[i] = g[t] . y[slot[i]].
__global__ void moe_combine_bwd_kernel(const float* __restrict__ g, const float* __restrict__ y, const int32_t* __restrict__ slot,
                                       const float* __restrict__ w, int K, int D, float* __restrict__ dy, float* __restrict__ dw) {
  __shared__ float sh[32];
  const int i = blockIdx.x, t = i / K;
  const float* gt = g + (int64_t)t * D;
  const float* yi = y + (int64_t)slot[i] * D;
  float* di = dy + (int64_t)slot[i] * D;
  float acc = 0.f;
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    di[j] = w[i] * gt[j];
    acc = fmaf(gt[j], yi[j], acc);
  }
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) dw[i] = acc;
}

void combine(cudaStream_t s, const float* y, const int32_t* slot, const float* w, int T, int K, int D, const float* add, float* out) {
  if (T <= 0) return;
  moe_combine_kernel<<<T, kNT, 0, s>>>(y, slot, w, K, D, add, out);
  check_launch("moe_combine_kernel", s);
}

int64_t expert_gu(const rs_model* m, int l, int e) { return m->lo[l].experts + e * rs_shared::expert_size(m->d); }

// Routes the T tokens on the host from the router logits (device) and uploads the grouping.
void route(rs_model* m, int l, int T, MoeDev& b) {
  const Dims& d = m->d;
  const LayerOffsets& o = m->lo[l];
  cudaStream_t s = m->stream;
  const int E = d.E, K = d.K;
  const size_t TK = (size_t)T * K;
  b.probs.resize((size_t)T * E);
  b.w.resize(TK);
  b.sel.resize(TK);
  to_host(b.probs.data(), b.logits.p, sizeof(float) * b.probs.size(), s, "router logits");
  if (o.ebias >= 0) {
    b.ebias.resize(E);
    to_host(b.ebias.data(), m->P() + o.ebias, sizeof(float) * E, s, "expert correction bias");
  }
  for (int t = 0; t < T; t++)
    rs_shared::moe_route_row(d, b.probs.data() + (size_t)t * E, o.ebias >= 0 ? b.ebias.data() : nullptr, b.sel.data() + t * K, b.w.data() + t * K);
  rs_shared::moe_group_picks(b.sel.data(), T, E, K, b.eoff, b.slot);
  b.row_tok.resize(TK);
  for (size_t i = 0; i < TK; i++) b.row_tok[b.slot[i]] = (int32_t)(i / K);
  std::vector<int32_t> ints(b.slot);
  ints.insert(ints.end(), b.row_tok.begin(), b.row_tok.end());
  upload(b.ints, ints.data(), ints.size(), s, "expert routing");
  upload(b.w_d, b.w.data(), TK, s, "expert weights");
}

// The shared expert (GLM-4-MoE) on every token: b.sy [T, D].
void shared_fwd(rs_model* m, int l, const float* x, int T, MoeDev& b, bool row_independent) {
  const Dims& d = m->d;
  const int64_t gu = m->lo[l].shared, down = gu + 2LL * d.Is * d.D;
  b.sgu.reserve((size_t)T * 2 * d.Is, "shared expert gate|up");
  b.shm.reserve((size_t)T * d.Is, "shared expert SwiGLU");
  b.sy.reserve((size_t)T * d.D, "shared expert output");
  linear_fwd(m->gemm, x, T, d.D, m->P() + gu, m->Wb(gu), 2 * d.Is, nullptr, b.sgu.p, row_independent, "shared expert gate_up_proj");
  swiglu_fwd(m->stream, b.sgu.p, b.sgu.p + d.Is, 2LL * d.Is, b.shm.p, d.Is, T, d.Is);
  linear_fwd(m->gemm, b.shm.p, T, d.Is, m->P() + down, m->Wb(down), d.D, nullptr, b.sy.p, row_independent, "shared expert down_proj");
}

}  // namespace

void moe_fwd(rs_model* m, int l, const float* x, int T, MoeDev& b, float* out, bool row_independent) {
  const Dims& d = m->d;
  const LayerOffsets& o = m->lo[l];
  cudaStream_t s = m->stream;
  const int D = d.D, E = d.E, K = d.K, Im = d.Im;
  const size_t TK = (size_t)T * K;
  b.logits.reserve((size_t)T * E, "router logits");
  gemm_own(s, false, true, T, E, D, 1.f, x, D, m->P() + o.router, nullptr, D, 0.f, b.logits.p, E);
  route(m, l, T, b);
  b.x.reserve(TK * D, "expert inputs");
  b.gu.reserve(TK * 2 * Im, "expert gate|up");
  b.hm.reserve(TK * Im, "expert SwiGLU");
  b.y.reserve(TK * D, "expert outputs");
  gather_rows(s, x, D, b.ints.p + TK, (int)TK, D, b.x.p);
  for (int e = 0; e < E; e++) {
    const int r0 = b.eoff[e], n = b.eoff[e + 1] - r0;
    if (n == 0) continue;
    const int64_t gu = expert_gu(m, l, e), down = gu + 2LL * Im * D;
    float* g = b.gu.p + (size_t)r0 * 2 * Im;
    linear_fwd(m->gemm, b.x.p + (size_t)r0 * D, n, D, m->P() + gu, m->Wb(gu), 2 * Im, nullptr, g, row_independent, "expert gate_up_proj");
    swiglu_fwd(s, g, g + Im, 2LL * Im, b.hm.p + (size_t)r0 * Im, Im, n, Im);
    linear_fwd(m->gemm, b.hm.p + (size_t)r0 * Im, n, Im, m->P() + down, m->Wb(down), D, nullptr, b.y.p + (size_t)r0 * D, row_independent,
               "expert down_proj");
  }
  if (o.shared >= 0) shared_fwd(m, l, x, T, b, row_independent);
  combine(s, b.y.p, b.ints.p, b.w_d.p, T, K, D, o.shared >= 0 ? b.sy.p : nullptr, out);
}

namespace {

// The shared expert's backward: its weight gradients into G, its input gradient added into dx.
void shared_bwd(rs_model* m, int l, const float* x, int T, const MoeDev& b, const float* dout, MoeScratchDev& sc, float* dx) {
  const Dims& d = m->d;
  const int D = d.D, Is = d.Is;
  const int64_t gu = m->lo[l].shared, down = gu + 2LL * Is * D;
  float* G = m->G();
  sc.dhm.reserve((size_t)T * Is, "MoE backward scratch");  // the experts are done with it
  sc.dgu.reserve((size_t)T * 2 * Is, "MoE backward scratch");
  linear_bwd_dx(m->gemm, dout, T, D, m->P() + down, m->Wb(down), Is, 0.f, sc.dhm.p, "shared expert down_proj dx");
  linear_bwd_dw(m->gemm, dout, b.shm.p, T, Is, D, G + down, "shared expert down_proj dW");
  swiglu_bwd(m->stream, sc.dhm.p, Is, b.sgu.p, b.sgu.p + Is, 2LL * Is, sc.dgu.p, sc.dgu.p + Is, 2LL * Is, T, Is);
  linear_bwd_dx(m->gemm, sc.dgu.p, T, 2 * Is, m->P() + gu, m->Wb(gu), D, 1.f, dx, "shared expert gate_up_proj dx");
  linear_bwd_dw(m->gemm, sc.dgu.p, x, T, D, 2 * Is, G + gu, "shared expert gate_up_proj dW");
}

// Every expert's products backward over its grouped rows: sc.dx [TK, D] = dL/d(grouped input).
void experts_bwd(rs_model* m, int l, const MoeDev& b, MoeScratchDev& sc) {
  const Dims& d = m->d;
  const int D = d.D, Im = d.Im;
  float* G = m->G();
  for (int e = 0; e < d.E; e++) {
    const int r0 = b.eoff[e], n = b.eoff[e + 1] - r0;
    if (n == 0) continue;
    const int64_t gu = expert_gu(m, l, e), down = gu + 2LL * Im * D;
    const float* dy = sc.dy.p + (size_t)r0 * D;
    float* dhm = sc.dhm.p + (size_t)r0 * Im;
    float* dgu = sc.dgu.p + (size_t)r0 * 2 * Im;
    const float* g = b.gu.p + (size_t)r0 * 2 * Im;
    linear_bwd_dx(m->gemm, dy, n, D, m->P() + down, m->Wb(down), Im, 0.f, dhm, "expert down_proj dx");
    linear_bwd_dw(m->gemm, dy, b.hm.p + (size_t)r0 * Im, n, Im, D, G + down, "expert down_proj dW");
    swiglu_bwd(m->stream, dhm, Im, g, g + Im, 2LL * Im, dgu, dgu + Im, 2LL * Im, n, Im);
    linear_bwd_dx(m->gemm, dgu, n, 2 * Im, m->P() + gu, m->Wb(gu), D, 0.f, sc.dx.p + (size_t)r0 * D, "expert gate_up_proj dx");
    linear_bwd_dw(m->gemm, dgu, b.x.p + (size_t)r0 * D, n, D, 2 * Im, G + gu, "expert gate_up_proj dW");
  }
}

}  // namespace

void moe_bwd(rs_model* m, int l, const float* x, int T, MoeDev& b, const float* dout, const std::vector<float>& aux_dp, MoeScratchDev& sc,
             float* dx) {
  const Dims& d = m->d;
  const LayerOffsets& o = m->lo[l];
  cudaStream_t s = m->stream;
  const int D = d.D, E = d.E, K = d.K, Im = d.Im;
  const size_t TK = (size_t)T * K;
  sc.dy.reserve(TK * D, "MoE backward scratch");
  sc.dhm.reserve(TK * Im, "MoE backward scratch");
  sc.dgu.reserve(TK * 2 * Im, "MoE backward scratch");
  sc.dx.reserve(TK * D, "MoE backward scratch");
  sc.dw.reserve(TK, "MoE backward scratch");
  sc.dp.reserve((size_t)T * E, "MoE backward scratch");
  moe_combine_bwd_kernel<<<(unsigned)TK, kNT, 0, s>>>(dout, b.y.p, b.ints.p, b.w_d.p, K, D, sc.dy.p, sc.dw.p);
  check_launch("moe_combine_bwd_kernel", s);
  experts_bwd(m, l, b, sc);
  combine(s, sc.dx.p, b.ints.p, nullptr, T, K, D, nullptr, dx);
  // The router: dL/dw of the picks to the host, dL/dlogit back (the same code as the CPU backend's).
  sc.dw_host.resize(TK);
  sc.dp_host.resize((size_t)T * E);
  to_host(sc.dw_host.data(), sc.dw.p, sizeof(float) * TK, s, "pick weight gradients");
  for (int t = 0; t < T; t++)
    rs_shared::moe_route_row_bwd(d, b.probs.data() + (size_t)t * E, b.sel.data() + (size_t)t * K, b.w.data() + (size_t)t * K,
                                 sc.dw_host.data() + (size_t)t * K, aux_dp, sc.dp_host.data() + (size_t)t * E);
  to_device(sc.dp.p, sc.dp_host.data(), sizeof(float) * sc.dp_host.size(), s, "router logit gradients");
  if (o.shared >= 0) shared_bwd(m, l, x, T, b, dout, sc, dx);
  linear_bwd_dw(m->gemm, sc.dp.p, x, T, D, E, m->G() + o.router, "router dW");
  linear_bwd_dx(m->gemm, sc.dp.p, T, E, m->P() + o.router, nullptr, D, 1.f, dx, "router dx");
}

}  // namespace rsc
