// Mixture-of-experts block, forward and backward (see moe.h). Every per-token step runs per row; products run per
// expert over its grouped rows. Sums over picks run in pick order and weight gradients accumulate expert by expert,
// so results do not depend on the thread count.
#include "moe.h"

#include <algorithm>
#include <cmath>

#include "common.h"

namespace rs {

namespace {

// Softmax of one row of logits in place, then its top-k (ties: the lower expert first).
void route_row(float* p, int E, int K, bool norm, int32_t* sel, float* w) {
  float mx = p[0];
  for (int e = 1; e < E; e++) mx = std::max(mx, p[e]);
  double sum = 0;
  for (int e = 0; e < E; e++) sum += (p[e] = std::exp(p[e] - mx));
  const float inv = (float)(1.0 / sum);
  for (int e = 0; e < E; e++) p[e] *= inv;
  for (int k = 0; k < K; k++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      bool taken = false;
      for (int j = 0; j < k; j++) taken |= sel[j] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    sel[k] = best;
    w[k] = p[best];
  }
  if (!norm) return;
  float s = 0.f;
  for (int k = 0; k < K; k++) s += w[k];
  for (int k = 0; k < K; k++) w[k] /= s;
}

// Slots grouped by expert, in (token, pick) order within an expert.
void group_picks(MoeBuf& b, int T, int E, int K) {
  b.eoff.assign(E + 1, 0);
  for (int i = 0; i < T * K; i++) b.eoff[b.sel[i] + 1]++;
  for (int e = 0; e < E; e++) b.eoff[e + 1] += b.eoff[e];
  std::vector<int32_t> cur(b.eoff.begin(), b.eoff.end() - 1);
  b.slot.resize((size_t)T * K);
  for (int i = 0; i < T * K; i++) b.slot[i] = cur[b.sel[i]]++;
}

const float* expert_gu(const MoeArgs& a, int e) { return a.P + a.o.experts + e * rs_shared::expert_size(a.d); }
const float* expert_down(const MoeArgs& a, int e) { return expert_gu(a, e) + 2LL * a.d.Im * a.d.D; }

}  // namespace

void moe_fwd(const MoeArgs& a, const float* x, int T, MoeBuf& b, float* out) {
  const int D = a.d.D, E = a.d.E, K = a.d.K, Im = a.d.Im, nt = a.nt;
  const size_t TK = (size_t)T * K;
  b.probs.resize((size_t)T * E);
  b.w.resize(TK);
  b.sel.resize(TK);
  b.x.resize(TK * D);
  b.gu.resize(TK * 2 * Im);
  b.hm.resize(TK * Im);
  b.y.resize(TK * D);
  linear_fwd(a.impl, x, T, D, a.P + a.o.router, E, nullptr, b.probs.data(), nt);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < T; t++) route_row(b.probs.data() + (size_t)t * E, E, K, a.d.norm_topk, b.sel.data() + (size_t)t * K, b.w.data() + (size_t)t * K);
  group_picks(b, T, E, K);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int i = 0; i < (int)TK; i++) std::memcpy(b.x.data() + (size_t)b.slot[i] * D, x + (size_t)(i / K) * D, sizeof(float) * D);
  for (int e = 0; e < E; e++) {
    const int r0 = b.eoff[e], n = b.eoff[e + 1] - r0;
    if (n == 0) continue;
    float* gu = b.gu.data() + (size_t)r0 * 2 * Im;
    linear_fwd(a.impl, b.x.data() + (size_t)r0 * D, n, D, expert_gu(a, e), 2 * Im, nullptr, gu, nt);
    swiglu_fwd_rows(gu, n, Im, b.hm.data() + (size_t)r0 * Im, nt);
    linear_fwd(a.impl, b.hm.data() + (size_t)r0 * Im, n, Im, expert_down(a, e), D, nullptr, b.y.data() + (size_t)r0 * D, nt);
  }
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < T; t++) {
    float* o = out + (size_t)t * D;
    std::fill(o, o + D, 0.f);
    for (int k = 0; k < K; k++) axpy(b.w[(size_t)t * K + k], b.y.data() + (size_t)b.slot[(size_t)t * K + k] * D, o, D);
  }
}

namespace {

// dL/dp for one token: from the pick weights (through the renormalisation) and the aux loss; then the softmax.
void router_row_bwd(const float* p, const int32_t* sel, const float* w, const float* dw, int E, int K, bool norm, const std::vector<float>& aux_dp,
                    float* dp) {
  for (int e = 0; e < E; e++) dp[e] = aux_dp.empty() ? 0.f : aux_dp[e];
  if (norm) {
    float s = 0.f, wdw = 0.f;
    for (int k = 0; k < K; k++) {
      s += p[sel[k]];
      wdw += w[k] * dw[k];
    }
    for (int k = 0; k < K; k++) dp[sel[k]] += (dw[k] - wdw) / s;
  } else {
    for (int k = 0; k < K; k++) dp[sel[k]] += dw[k];
  }
  float pdp = 0.f;
  for (int e = 0; e < E; e++) pdp += p[e] * dp[e];
  for (int e = 0; e < E; e++) dp[e] = p[e] * (dp[e] - pdp);  // now dL/dlogit
}

}  // namespace

void moe_bwd(const MoeArgs& a, const float* x, int T, const MoeBuf& b, const float* dout, const std::vector<float>& aux_dp, MoeScratch& s,
             float* G, float* dx) {
  const int D = a.d.D, E = a.d.E, K = a.d.K, Im = a.d.Im, nt = a.nt;
  const size_t TK = (size_t)T * K;
  s.dy.resize(TK * D);
  s.dhm.resize(TK * Im);
  s.dgu.resize(TK * 2 * Im);
  s.dx.resize(TK * D);
  s.dp.resize((size_t)T * E);
  std::vector<float> dw(TK);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int i = 0; i < (int)TK; i++) {
    const float* g = dout + (size_t)(i / K) * D;
    const float* y = b.y.data() + (size_t)b.slot[i] * D;
    float* dy = s.dy.data() + (size_t)b.slot[i] * D;
    for (int j = 0; j < D; j++) dy[j] = b.w[i] * g[j];
    dw[i] = dot(g, y, D);
  }
  for (int e = 0; e < E; e++) {
    const int r0 = b.eoff[e], n = b.eoff[e + 1] - r0;
    if (n == 0) continue;
    const int64_t off_gu = a.o.experts + e * rs_shared::expert_size(a.d), off_down = off_gu + 2LL * Im * D;
    const float* dy = s.dy.data() + (size_t)r0 * D;
    float* dhm = s.dhm.data() + (size_t)r0 * Im;
    float* dgu = s.dgu.data() + (size_t)r0 * 2 * Im;
    linear_bwd_dx(a.impl, dy, n, D, a.P + off_down, Im, 0.f, dhm, nt);
    linear_bwd_dw(a.impl, dy, b.hm.data() + (size_t)r0 * Im, n, Im, D, G + off_down, nt);
    swiglu_bwd_rows(dhm, b.gu.data() + (size_t)r0 * 2 * Im, n, Im, dgu, nt);
    linear_bwd_dx(a.impl, dgu, n, 2 * Im, a.P + off_gu, D, 0.f, s.dx.data() + (size_t)r0 * D, nt);
    linear_bwd_dw(a.impl, dgu, b.x.data() + (size_t)r0 * D, n, D, 2 * Im, G + off_gu, nt);
  }
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < T; t++) {
    float* o = dx + (size_t)t * D;
    std::fill(o, o + D, 0.f);
    for (int k = 0; k < K; k++) axpy(1.f, s.dx.data() + (size_t)b.slot[(size_t)t * K + k] * D, o, D);
    router_row_bwd(b.probs.data() + (size_t)t * E, b.sel.data() + (size_t)t * K, b.w.data() + (size_t)t * K, dw.data() + (size_t)t * K, E, K,
                   a.d.norm_topk, aux_dp, s.dp.data() + (size_t)t * E);
  }
  linear_bwd_dw(a.impl, s.dp.data(), x, T, D, E, G + a.o.router, nt);
  linear_bwd_dx(a.impl, s.dp.data(), T, E, a.P + a.o.router, D, 1.f, dx, nt);
}

void moe_count_picks(const MoeBuf& b, int T, int K, std::vector<double>& counts) {
  for (int i = 0; i < T * K; i++) counts[b.sel[i]] += 1;
}

void moe_sum_probs(const MoeBuf& b, int T, int E, std::vector<double>& sums) {
  for (int t = 0; t < T; t++)
    for (int e = 0; e < E; e++) sums[e] += b.probs[(size_t)t * E + e];
}

}  // namespace rs
