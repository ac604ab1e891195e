// LoRA dropout on the CPU backend (rs_model_set_lora, kernels.h): the model holds the merged weights W0 + s B A, so a
// train micro-batch adds s B A (drop(x) - x) to each adapted projection's output, which makes it W0 x + s B A drop(x),
// PEFT's training forward. The backward adds that term's gradient to x and accumulates its part of dA and dB
// (dA_corr = dU^T E, dB_corr = s dY^T U, with E = drop(x) - x, U = E A^T, dU = s dY B) into the LoRA gradient buffer;
// with the merged weight's own gradient G the adapters' gradient is exactly s B^T dY^T drop(x) and s dY^T (A drop(x)).
// The mask is recomputed in the backward from its hash (rs_shared::lora_keep), never kept between the passes.
#include <algorithm>
#include <cstring>
#include <vector>

#include "model.h"
#include "../shared/lora_dropout.h"

namespace rs {

namespace {

// F [T, in] = keep - 1 (F x = drop(x) - x) and E = F x.
void dropped_minus_x(const LoraState& s, const LoraSite& site, const float* x, int ldx, int T, float* F, float* E, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < T; t++) {
    const uint64_t key = rs_shared::lora_row_key(s.seed, site.k, t);
    for (int j = 0; j < site.in; j++) {
      const int64_t i = (int64_t)t * site.in + j;
      F[i] = rs_shared::lora_keep(key, j, s.p) - 1.f;
      E[i] = x[(int64_t)t * ldx + j] * F[i];
    }
  }
}

}  // namespace

void lora_fwd(rs_model* m, GemmImpl impl, int l, LoraSlot slot, const float* x, int ldx, int T, float* y, int ldy) {
  LoraState& s = m->lora;
  const int nt = m->threads, r = s.rank;
  for (const LoraSite& site : s.sites) {
    if (site.layer != l || site.slot != slot) continue;
    const float* A = s.adapters.data() + site.a;
    const float* B = s.adapters.data() + site.b;
    std::vector<float> F((size_t)T * site.in), E((size_t)T * site.in), U((size_t)T * r), C((size_t)T * site.out);
    dropped_minus_x(s, site, x, ldx, T, F.data(), E.data(), nt);
    linear_fwd(impl, E.data(), T, site.in, A, r, nullptr, U.data(), nt);
    linear_fwd(impl, U.data(), T, r, B, site.out, nullptr, C.data(), nt);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < T; t++)
      for (int o = 0; o < site.out; o++) y[(int64_t)t * ldy + site.col0 + o] += s.scale * C[(size_t)t * site.out + o];
  }
}

void lora_bwd(rs_model* m, GemmImpl impl, int l, LoraSlot slot, const float* x, int ldx, int T, const float* dy, int ldy, float* dx) {
  LoraState& s = m->lora;
  const int nt = m->threads, r = s.rank;
  for (const LoraSite& site : s.sites) {
    if (site.layer != l || site.slot != slot) continue;
    const float* A = s.adapters.data() + site.a;
    const float* B = s.adapters.data() + site.b;
    std::vector<float> F((size_t)T * site.in), E((size_t)T * site.in), U((size_t)T * r), Ds((size_t)T * site.out), dU((size_t)T * r);
    dropped_minus_x(s, site, x, ldx, T, F.data(), E.data(), nt);
    linear_fwd(impl, E.data(), T, site.in, A, r, nullptr, U.data(), nt);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < T; t++)
      for (int o = 0; o < site.out; o++) Ds[(size_t)t * site.out + o] = s.scale * dy[(int64_t)t * ldy + site.col0 + o];
    linear_bwd_dx(impl, Ds.data(), T, site.out, B, r, 0.f, dU.data(), nt);
    linear_bwd_dw(impl, Ds.data(), U.data(), T, r, site.out, s.grads.data() + site.b, nt);
    linear_bwd_dw(impl, dU.data(), E.data(), T, site.in, r, s.grads.data() + site.a, nt);
    float* dE = E.data();  // E is not needed any more
    linear_bwd_dx(impl, dU.data(), T, r, A, site.in, 0.f, dE, nt);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < T; t++)
      for (int j = 0; j < site.in; j++) dx[(int64_t)t * ldx + j] += dE[(size_t)t * site.in + j] * F[(size_t)t * site.in + j];
  }
}

namespace {

// Where target k's weight lies: which layer, which fused product (slot) and which of its output columns.
int32_t resolve_site(const rs_model* m, const rs_lora_target& tg, int k, int rank, int64_t n_adapters, LoraSite& out, rs_error* err) {
  const Dims& d = m->d;
  const rs_tensor_info* info = nullptr;
  for (const rs_tensor_info& t : m->tensors)
    if (t.offset == tg.weight_offset && t.ndim == 2) info = &t;
  if (!info) return fail(err, RS_ERR_INVALID_ARGUMENT, "set_lora: target %d: no weight matrix at offset %lld", k, (long long)tg.weight_offset);
  out = LoraSite{-1, LoraSlot::Qkv, 0, (int)info->shape[0], (int)info->shape[1], tg.a_offset, tg.b_offset, k};
  for (int l = 0; l < d.L && out.layer < 0; l++) {
    const LayerOffsets& o = m->lo[l];
    const int64_t w = tg.weight_offset;
    auto in_block = [&](int64_t at, int64_t rows, LoraSlot slot) {
      if (at < 0 || w < at || w >= at + rows * d.D) return;
      out.layer = l, out.slot = slot, out.col0 = (int)((w - at) / d.D);
    };
    in_block(o.wqkv, d.QKV, LoraSlot::Qkv);
    if (w == o.wo) out.layer = l, out.slot = LoraSlot::O;
    if (o.router < 0) {
      in_block(o.wgu, 2LL * d.I, LoraSlot::GateUp);
      if (w == o.wdown) out.layer = l, out.slot = LoraSlot::Down;
    }
  }
  if (out.layer < 0) return fail(err, RS_ERR_INVALID_ARGUMENT, "set_lora: target %d (%s) is not a dense q/k/v/o/gate/up/down projection", k, info->name);
  const int64_t need_a = tg.a_offset + (int64_t)rank * out.in, need_b = tg.b_offset + (int64_t)out.out * rank;
  if (tg.a_offset < 0 || tg.b_offset < 0 || need_a > n_adapters || need_b > n_adapters)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "set_lora: target %d's A or B lies outside the %lld adapter values", k, (long long)n_adapters);
  return RS_OK;
}

}  // namespace

}  // namespace rs

using namespace rs;

extern "C" {

int32_t rs_model_set_lora(rs_model* m, const rs_lora_spec* spec, rs_error* err) {
  if (!m || !spec) return fail(err, RS_ERR_INVALID_ARGUMENT, "set_lora: null argument");
  if (!(spec->dropout >= 0.f && spec->dropout < 1.f))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "set_lora: dropout must be in [0, 1) (got %g)", (double)spec->dropout);
  if (spec->n_targets < 0 || spec->rank < 1 || spec->n_adapters < 0 || (spec->n_targets > 0 && (!spec->targets || !spec->adapters)))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "set_lora: bad targets, rank or adapters");
  std::vector<LoraSite> sites(spec->n_targets);
  for (int k = 0; k < spec->n_targets; k++)
    if (int32_t s = resolve_site(m, spec->targets[k], k, spec->rank, spec->n_adapters, sites[k], err)) return s;
  try {
    LoraState& s = m->lora;
    s.rank = spec->rank, s.scale = spec->scale, s.p = spec->dropout, s.seed = spec->seed;
    // No correction at dropout 0: the merged weights are then exactly PEFT's forward.
    if (!(spec->dropout > 0.f)) sites.clear();
    s.sites = std::move(sites);
    s.adapters.assign(spec->adapters, spec->adapters + (spec->n_targets > 0 ? spec->n_adapters : 0));
    if ((int64_t)s.grads.size() != spec->n_adapters) s.grads.assign((size_t)spec->n_adapters, 0.f);
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "set_lora: out of memory");
  }
  return ok(err);
}

int32_t rs_model_lora_grads(rs_model* m, float* out, int64_t n, rs_error* err) {
  if (!m || (!out && n > 0)) return fail(err, RS_ERR_INVALID_ARGUMENT, "lora_grads: null argument");
  if (n != (int64_t)m->lora.grads.size())
    return fail(err, RS_ERR_INVALID_ARGUMENT, "lora_grads: %lld values asked, the LoRA spec has %lld", (long long)n, (long long)m->lora.grads.size());
  if (n > 0) std::memcpy(out, m->lora.grads.data(), sizeof(float) * (size_t)n);
  return ok(err);
}

}  // extern "C"
