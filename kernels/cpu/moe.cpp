// Mixture-of-experts block, forward and backward (see moe.h). Every per-token step runs per row; products run per
// expert over its grouped rows. Sums over picks run in pick order and weight gradients accumulate expert by expert,
// so results do not depend on the thread count.
#include "moe.h"

#include <algorithm>
#include <cmath>

#include "common.h"
#include "../shared/moe_route.h"

namespace rs {

namespace {

// Slots grouped by expert, in (token, pick) order within an expert.
void group_picks(MoeBuf& b, int T, int E, int K) { rs_shared::moe_group_picks(b.sel.data(), T, E, K, b.eoff, b.slot); }

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
    rs_shared::moe_route_row(a.d, p, a.d.sigmoid_router ? a.P + a.o.ebias : nullptr, b.sel.data() + (size_t)t * K, b.w.data() + (size_t)t * K);
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
    rs_shared::moe_route_row_bwd(a.d, b.probs.data() + (size_t)t * E, b.sel.data() + (size_t)t * K, b.w.data() + (size_t)t * K,
                                 dw.data() + (size_t)t * K, aux_dp, s.dp.data() + (size_t)t * E);
  }
  if (a.o.shared >= 0) shared_bwd(a, x, T, b, dout, s, G, dx);
  linear_bwd_dw(a.impl, s.dp.data(), x, T, D, E, G + a.o.router, nt);
  linear_bwd_dx(a.impl, s.dp.data(), T, E, a.P + a.o.router, D, 1.f, dx, nt);
}

}  // namespace rs
