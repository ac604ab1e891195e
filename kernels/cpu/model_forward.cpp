// The decoder forward over one packed row, and rs_model_forward (logits for every token).
#include <algorithm>

#include "model.h"

namespace rs {

void forward_layers(rs_model* m, GemmImpl impl, const int32_t* tokens, int T, KvSink* sink, bool train) {
  const Dims& d = m->d;
  Acts& a = m->acts;
  const float* P = m->params.p;
  const int nt = m->threads, A = d.H * d.hd;
  const AttnDims ad{T, d.H, d.KV, d.hd, d.QKV, d.QKV, d.QKV, A};

  embedding_fwd(P + m->off_embed, d.D, tokens, T, a.X[0], nt);
  rmsnorm_fwd(a.X[0], P + m->lo[0].ln1, T, d.D, d.eps, a.layers[0].ln1, a.layers[0].rstd1, nt);
  for (int l = 0; l < d.L; l++) {
    const LayerOffsets& o = m->lo[l];
    Acts::Layer& y = a.layers[l];
    // q|k|v in one product: their weights (and biases) are adjacent in the layout.
    linear_fwd(impl, y.ln1, T, d.D, P + o.wqkv, d.QKV, o.bqkv >= 0 ? P + o.bqkv : nullptr, y.qkv, nt);
    if (train) lora_fwd(m, impl, l, LoraSlot::Qkv, y.ln1, d.D, T, y.qkv, d.QKV);
    qk_norm_fwd(m, l, y.qkv, T, y.qk_raw, y.qk_rstd);
    rope_apply(y.qkv, T, d.QKV, d.H, d.hd, a.row.pos.data(), m->rope, false, nt);
    rope_apply(y.qkv + A, T, d.QKV, d.KV, d.hd, a.row.pos.data(), m->rope, false, nt);
    if (sink) sink->put(l, y.qkv + A, y.qkv + A + d.KV * d.hd, d.QKV);
    attention_fwd(y.qkv, y.qkv + A, y.qkv + A + d.KV * d.hd, ad, a.mask(), y.att, y.lse, a.attn, nt);
    linear_fwd(impl, y.att, T, A, P + o.wo, d.D, nullptr, a.tmpD, nt);
    if (train) lora_fwd(m, impl, l, LoraSlot::O, y.att, A, T, a.tmpD, d.D);
    residual_rmsnorm_fwd(a.X[l], a.tmpD, P + o.ln2, T, d.D, d.eps, y.xmid, y.ln2, y.rstd2, nt);
    mlp_fwd(m, impl, l, y.ln2, T, y.gu, y.hm, a.moe[l], a.tmpD, train);
    const bool last = l + 1 == d.L;
    residual_rmsnorm_fwd(y.xmid, a.tmpD, P + (last ? m->off_norm : m->lo[l + 1].ln1), T, d.D, d.eps, a.X[l + 1],
                         last ? a.lnf : a.layers[l + 1].ln1, last ? a.rstdf : a.layers[l + 1].rstd1, nt);
  }
}

void mlp_fwd(rs_model* m, GemmImpl impl, int l, const float* x, int T, float* gu, float* hm, MoeBuf& moe, float* out, bool train) {
  const Dims& d = m->d;
  const LayerOffsets& o = m->lo[l];
  const float* P = m->params.p;
  if (o.router >= 0) return moe_fwd(MoeArgs{d, o, P, impl, m->threads}, x, T, moe, out);
  linear_fwd(impl, x, T, d.D, P + o.wgu, 2 * d.I, nullptr, gu, m->threads);
  if (train) lora_fwd(m, impl, l, LoraSlot::GateUp, x, d.D, T, gu, 2 * d.I);
  swiglu_fwd_rows(gu, T, d.I, hm, m->threads);
  linear_fwd(impl, hm, T, d.I, P + o.wdown, d.D, nullptr, out, m->threads);
  if (train) lora_fwd(m, impl, l, LoraSlot::Down, hm, d.I, T, out, d.D);
}

void qk_norm_fwd(const rs_model* m, int l, float* qkv, int T, float* raw, float* rstd) {
  const Dims& d = m->d;
  const LayerOffsets& o = m->lo[l];
  if (o.qn < 0) return;
  const int A = d.H * d.hd, QK = A + d.KV * d.hd, R = d.H + d.KV;
  const float* P = m->params.p;
  head_rmsnorm_fwd(qkv, T, d.QKV, d.H, d.hd, P + o.qn, d.eps, raw, QK, rstd, R, m->threads);
  head_rmsnorm_fwd(qkv + A, T, d.QKV, d.KV, d.hd, P + o.kn, d.eps, raw ? raw + A : nullptr, QK, rstd ? rstd + d.H : nullptr, R,
                   m->threads);
}

void qk_norm_bwd(rs_model* m, int l, float* dqkv, int T) {
  const Dims& d = m->d;
  const LayerOffsets& o = m->lo[l];
  if (o.qn < 0) return;
  const Acts::Layer& y = m->acts.layers[l];
  const int A = d.H * d.hd, QK = A + d.KV * d.hd, R = d.H + d.KV;
  const float* P = m->params.p;
  float* G = m->grads.p;
  head_rmsnorm_bwd(dqkv, T, d.QKV, d.H, d.hd, P + o.qn, y.qk_raw, QK, y.qk_rstd, R, G + o.qn, m->threads);
  head_rmsnorm_bwd(dqkv + A, T, d.QKV, d.KV, d.hd, P + o.kn, y.qk_raw + A, QK, y.qk_rstd + d.H, R, G + o.kn, m->threads);
}

}  // namespace rs

using namespace rs;

extern "C" {

int32_t rs_model_forward(rs_model* m, const int32_t* tokens, int32_t T, const int32_t* seg, int32_t S, const int32_t* parent, float* logits,
                         rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "forward: null model");
  if (int32_t s = check_batch(m, tokens, T, seg, S, parent, err)) return s;
  if (!logits) return fail(err, RS_ERR_INVALID_ARGUMENT, "forward: null logits output");
  try {
    if (!m->acts.ensure(m->d, T)) return fail(err, RS_ERR_OUT_OF_MEMORY, "forward: out of memory for %d tokens of activations", T);
    prepare_positions(m, seg, parent, S, T);
    forward_layers(m, GemmImpl::Auto, tokens, T, nullptr);
    linear_fwd(GemmImpl::Auto, m->acts.lnf, T, m->d.D, m->params.p + m->off_head, m->d.V, nullptr, logits, m->threads);
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "forward: out of memory");
  }
  return ok(err);
}

}  // extern "C"
