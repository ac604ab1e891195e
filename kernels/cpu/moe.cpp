// Mixture-of-experts block, forward and backward (see moe.h). Every per-token step runs per row; products run per
// expert over its grouped rows. Sums over picks run in pick order and weight gradients accumulate expert by expert,
// so results do not depend on the thread count.
#include "moe.h"

#include <algorithm>
#include <cmath>

#include "common.h"

namespace rs {

namespace {

// The top-k of c (ties: the lower index first).
void top_k(const float* c, int E, int K, int32_t* sel) {
  for (int k = 0; k < K; k++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      bool taken = false;
      for (int j = 0; j < k; j++) taken |= sel[j] == e;
      if (!taken && (best < 0 || c[e] > c[best])) best = e;
    }
    sel[k] = best;
  }
}

// Softmax of one row of logits in place, then its top-k.
void route_softmax(float* p, int E, int K, bool norm, int32_t* sel, float* w) {
  float mx = p[0];
  for (int e = 1; e < E; e++) mx = std::max(mx, p[e]);
  double sum = 0;
  for (int e = 0; e < E; e++) sum += (p[e] = std::exp(p[e] - mx));
  const float inv = (float)(1.0 / sum);
  for (int e = 0; e < E; e++) p[e] *= inv;
  top_k(p, E, K, sel);
  for (int k = 0; k < K; k++) w[k] = p[sel[k]];
  if (!norm) return;
  float s = 0.f;
  for (int k = 0; k < K; k++) s += w[k];
  for (int k = 0; k < K; k++) w[k] /= s;
}

// Sigmoid scores in place; the choice on scores + bias inside the best topk_group groups (a group's score: the sum
// of its two best; experts of other groups score 0, as transformers' masked_fill does); weights from the scores.
void route_sigmoid(const rs_shared::Dims& d, float* p, const float* bias, int32_t* sel, float* w) {
  const int E = d.E, K = d.K, G = d.n_group, per = E / G;
  std::vector<float> c(E);
  for (int e = 0; e < E; e++) {
    p[e] = 1.f / (1.f + std::exp(-p[e]));
    c[e] = p[e] + bias[e];
  }
  if (G > 1) {
    std::vector<float> gs(G);
    for (int g = 0; g < G; g++) {
      int32_t two[2];
      top_k(c.data() + g * per, per, 2, two);
      gs[g] = c[g * per + two[0]] + c[g * per + two[1]];
    }
    std::vector<int32_t> keep(d.topk_group);
    top_k(gs.data(), G, d.topk_group, keep.data());
    for (int g = 0; g < G; g++)
      if (std::find(keep.begin(), keep.end(), g) == keep.end()) std::fill(c.begin() + g * per, c.begin() + (g + 1) * per, 0.f);
  }
  top_k(c.data(), E, K, sel);
  float s = 0.f;
  for (int k = 0; k < K; k++) s += (w[k] = p[sel[k]]);
  for (int k = 0; k < K; k++) w[k] = (d.norm_topk ? w[k] / (s + 1e-20f) : w[k]) * d.scale;
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
  for (int t = 0; t < T; t++) {
    float* p = b.probs.data() + (size_t)t * E;
    if (a.d.sigmoid_router) route_sigmoid(a.d, p, a.P + a.o.ebias, b.sel.data() + (size_t)t * K, b.w.data() + (size_t)t * K);
    else route_softmax(p, E, K, a.d.norm_topk, b.sel.data() + (size_t)t * K, b.w.data() + (size_t)t * K);
  }
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
  if (a.o.shared < 0) return;
  const int Is = a.d.Is;
  b.sgu.resize((size_t)T * 2 * Is);
  b.shm.resize((size_t)T * Is);
  b.sy.resize((size_t)T * D);
  linear_fwd(a.impl, x, T, D, a.P + a.o.shared, 2 * Is, nullptr, b.sgu.data(), nt);
  swiglu_fwd_rows(b.sgu.data(), T, Is, b.shm.data(), nt);
  linear_fwd(a.impl, b.shm.data(), T, Is, a.P + a.o.shared + 2LL * Is * D, D, nullptr, b.sy.data(), nt);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < T; t++) axpy(1.f, b.sy.data() + (size_t)t * D, out + (size_t)t * D, D);
}

namespace {

// Sigmoid routing: dL/dscore of the picks through the renormalisation and scaling, then the sigmoid. The choice
// (bias, groups) is piecewise constant: no gradient.
void sigmoid_row_bwd(const rs_shared::Dims& d, const float* p, const int32_t* sel, const float* dw, float* dl) {
  const int E = d.E, K = d.K;
  std::fill(dl, dl + E, 0.f);
  float s = 0.f, udw = 0.f;
  for (int k = 0; k < K; k++) s += p[sel[k]];
  const float den = s + 1e-20f;
  for (int k = 0; k < K; k++) udw += dw[k] * p[sel[k]] / den;
  for (int k = 0; k < K; k++) dl[sel[k]] = d.norm_topk ? d.scale / den * (dw[k] - udw) : d.scale * dw[k];
  for (int e = 0; e < E; e++) dl[e] *= p[e] * (1.f - p[e]);
}

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

namespace {

// The shared expert's backward: its weight gradients into G, its input gradient added into dx.
void shared_bwd(const MoeArgs& a, const float* x, int T, const MoeBuf& b, const float* dout, MoeScratch& s, float* G, float* dx) {
  const int D = a.d.D, Is = a.d.Is, nt = a.nt;
  const int64_t gu = a.o.shared, down = gu + 2LL * Is * D;
  s.dhm.resize(std::max(s.dhm.size(), (size_t)T * Is));
  s.dgu.resize(std::max(s.dgu.size(), (size_t)T * 2 * Is));
  linear_bwd_dx(a.impl, dout, T, D, a.P + down, Is, 0.f, s.dhm.data(), nt);
  linear_bwd_dw(a.impl, dout, b.shm.data(), T, Is, D, G + down, nt);
  swiglu_bwd_rows(s.dhm.data(), b.sgu.data(), T, Is, s.dgu.data(), nt);
  linear_bwd_dx(a.impl, s.dgu.data(), T, 2 * Is, a.P + gu, D, 1.f, dx, nt);
  linear_bwd_dw(a.impl, s.dgu.data(), x, T, D, 2 * Is, G + gu, nt);
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
    if (a.d.sigmoid_router)
      sigmoid_row_bwd(a.d, b.probs.data() + (size_t)t * E, b.sel.data() + (size_t)t * K, dw.data() + (size_t)t * K, s.dp.data() + (size_t)t * E);
    else
      router_row_bwd(b.probs.data() + (size_t)t * E, b.sel.data() + (size_t)t * K, b.w.data() + (size_t)t * K, dw.data() + (size_t)t * K, E, K,
                     a.d.norm_topk, aux_dp, s.dp.data() + (size_t)t * E);
  }
  if (a.o.shared >= 0) shared_bwd(a, x, T, b, dout, s, G, dx);
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
