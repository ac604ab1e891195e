// One packed micro-batch: forward, the LM head + fused loss on the loss rows only (in row chunks, so the
// [rows, vocab] logits never exist for the whole row), then the backward through every layer, accumulating
// into the flat gradient buffer.
#include <algorithm>

#include "model.h"
#include "../shared/moe_route.h"

namespace rs {

namespace {

// LM head + loss for the rows that predict a loss token. dlnf receives the gradient of the final-norm output.
void head_and_loss(rs_model* m, GemmImpl impl, const int32_t* tokens, int T, const uint8_t* mask, const float* adv,
                   const float* slp, const rs_loss_spec& spec, rs_loss_stats* stats, float* token_logp, float* dlnf) {
  const Dims& d = m->d;
  const int nt = m->threads;
  const float* W = m->params.p + m->off_head;
  float* dW = m->grads.p + m->off_head;
  std::fill(dlnf, dlnf + (int64_t)T * d.D, 0.f);
  if (token_logp) std::fill(token_logp, token_logp + T, 0.f);

  const std::vector<int32_t>& src = m->acts.row.src;  // predicted token t is read from hidden row src[t]
  std::vector<int32_t> rows;
  for (int t = 0; t < T; t++)
    if (mask[t]) rows.push_back(t);
  if (rows.empty()) return;
  // Chunk of rows: big enough to amortise packing W, small enough that R x V logits stay ~64 MB at most.
  const int R = (int)std::max<int64_t>(64, std::min<int64_t>(1024, (16LL << 20) / d.V));
  if (!m->head_buf.resize((size_t)R * (2 * d.D + d.V) + 4 * R)) throw std::bad_alloc();
  float* X = m->head_buf.p;
  float* dX = X + (size_t)R * d.D;
  float* logits = dX + (size_t)R * d.D;
  float* adv_c = logits + (size_t)R * d.V;
  float* slp_c = adv_c + R;
  float* lp_c = slp_c + R;
  std::vector<int32_t> tgt(R);
  std::vector<uint8_t> ones(R, 1);
  const bool policy = rs_shared::loss_uses_policy(spec.kind);

  for (size_t c0 = 0; c0 < rows.size(); c0 += R) {
    const int n = (int)std::min<size_t>(R, rows.size() - c0);
    for (int i = 0; i < n; i++) {
      const int t = rows[c0 + i];
      std::memcpy(X + (int64_t)i * d.D, m->acts.lnf + (int64_t)src[t] * d.D, sizeof(float) * d.D);
      tgt[i] = tokens[t];
      adv_c[i] = policy ? adv[t] : 0.f;
      slp_c[i] = policy ? slp[t] : 0.f;
    }
    linear_fwd(impl, X, n, d.D, W, d.V, nullptr, logits, nt);
    loss_rows(logits, n, d.V, tgt.data(), ones.data(), adv_c, slp_c, spec, logits, lp_c, stats, nt);
    linear_bwd_dx(impl, logits, n, d.V, W, d.D, 0.f, dX, nt);
    linear_bwd_dw(impl, logits, X, n, d.D, d.V, dW, nt);
    for (int i = 0; i < n; i++) {
      const int t = rows[c0 + i];
      // Added, not copied: a parent's last row predicts the first token of each of its children (rows ascending,
      // so the sum's order is fixed).
      float* dst = dlnf + (int64_t)src[t] * d.D;
      const float* g = dX + (int64_t)i * d.D;
      for (int c = 0; c < d.D; c++) dst[c] += g[c];
      if (token_logp) token_logp[t] = lp_c[i];
    }
  }
}

// The load-balancing loss over every MoE layer of the row (rs_shared::moe_aux_loss), added to stats->loss; returns
// dLoss/dp per expert. Empty when the model has no aux loss.
std::vector<float> aux_loss(rs_model* m, int T, const uint8_t* mask, const rs_loss_spec& spec, rs_loss_stats* stats) {
  const Dims& d = m->d;
  if (!(d.aux_coef > 0) || d.moe_layers == 0) return {};
  std::vector<double> picks(d.E, 0.0), probs(d.E, 0.0);
  for (int l = 0; l < d.L; l++)
    if (m->lo[l].router >= 0) rs_shared::moe_aux_tally(m->acts.moe[l].sel.data(), m->acts.moe[l].probs.data(), T, d.E, d.K, picks, probs);
  double loss_tokens = 0;
  for (int t = 0; t < T; t++) loss_tokens += mask[t] != 0;
  std::vector<float> dp;
  stats->loss += rs_shared::moe_aux_loss(d, picks, probs, T, loss_tokens, spec.normalizer, dp);
  return dp;
}

// The MLP's backward (dense or MoE) from dout = dLoss/d(MLP output), into a.dln = dLoss/d(its normed input).
void mlp_bwd(rs_model* m, GemmImpl impl, int l, int T, const float* dout, const std::vector<float>& aux_dp) {
  const Dims& d = m->d;
  Acts& a = m->acts;
  Acts::Layer& y = a.layers[l];
  const LayerOffsets& o = m->lo[l];
  const float* P = m->params.p;
  float* G = m->grads.p;
  const int nt = m->threads;
  if (o.router >= 0) return moe_bwd(MoeArgs{d, o, P, impl, nt}, y.ln2, T, a.moe[l], dout, aux_dp, a.moe_scratch, G, a.dln);
  linear_bwd_dx(impl, dout, T, d.D, P + o.wdown, d.I, 0.f, a.dhm, nt);
  lora_bwd(m, impl, l, LoraSlot::Down, y.hm, d.I, T, dout, d.D, a.dhm);
  linear_bwd_dw(impl, dout, y.hm, T, d.I, d.D, G + o.wdown, nt);
  swiglu_bwd_rows(a.dhm, y.gu, T, d.I, a.dgu, nt);
  linear_bwd_dx(impl, a.dgu, T, 2 * d.I, P + o.wgu, d.D, 0.f, a.dln, nt);
  lora_bwd(m, impl, l, LoraSlot::GateUp, y.ln2, d.D, T, a.dgu, 2 * d.I, a.dln);
  linear_bwd_dw(impl, a.dgu, y.ln2, T, d.D, 2 * d.I, G + o.wgu, nt);
}

void backward_layers(rs_model* m, GemmImpl impl, const int32_t* tokens, int T, const float* dlnf, const std::vector<float>& aux_dp) {
  const Dims& d = m->d;
  Acts& a = m->acts;
  const float* P = m->params.p;
  float* G = m->grads.p;
  const int nt = m->threads, A = d.H * d.hd, KVD = d.KV * d.hd;
  const AttnDims ad{T, d.H, d.KV, d.hd, d.QKV, d.QKV, d.QKV, A};

  rmsnorm_bwd(dlnf, a.X[d.L], P + m->off_norm, a.rstdf, T, d.D, nullptr, a.dres, G + m->off_norm, nt);
  for (int l = d.L - 1; l >= 0; l--) {
    const LayerOffsets& o = m->lo[l];
    Acts::Layer& y = a.layers[l];
    // a.dres = dLoss/dX[l+1], which is also the gradient of the MLP output.
    mlp_bwd(m, impl, l, T, a.dres, aux_dp);
    rmsnorm_bwd(a.dln, y.xmid, P + o.ln2, y.rstd2, T, d.D, a.dres, a.dres, G + o.ln2, nt);
    // a.dres = dLoss/dxmid, also the gradient of the attention output projection.
    linear_bwd_dx(impl, a.dres, T, d.D, P + o.wo, A, 0.f, a.datt, nt);
    lora_bwd(m, impl, l, LoraSlot::O, y.att, A, T, a.dres, d.D, a.datt);
    linear_bwd_dw(impl, a.dres, y.att, T, A, d.D, G + o.wo, nt);
    attention_bwd(a.datt, y.qkv, y.qkv + A, y.qkv + A + KVD, y.att, y.lse, ad, a.mask(), a.dqkv,
                  a.dqkv + A, a.dqkv + A + KVD, attn_scratch(ad, a.attn), nt);
    rope_apply(a.dqkv, T, d.QKV, d.H, d.hd, a.row.pos.data(), m->rope, true, nt);
    rope_apply(a.dqkv + A, T, d.QKV, d.KV, d.hd, a.row.pos.data(), m->rope, true, nt);
    qk_norm_bwd(m, l, a.dqkv, T);
    linear_bwd_dx(impl, a.dqkv, T, d.QKV, P + o.wqkv, d.D, 0.f, a.dln, nt);
    lora_bwd(m, impl, l, LoraSlot::Qkv, y.ln1, d.D, T, a.dqkv, d.QKV, a.dln);
    linear_bwd_dw(impl, a.dqkv, y.ln1, T, d.D, d.QKV, G + o.wqkv, nt);
    if (o.bqkv >= 0) bias_bwd(a.dqkv, T, d.QKV, G + o.bqkv, nt);
    rmsnorm_bwd(a.dln, a.X[l], P + o.ln1, y.rstd1, T, d.D, a.dres, a.dres, G + o.ln1, nt);
  }
  embedding_bwd(a.dres, tokens, T, d.D, G + m->off_embed);
}

}  // namespace

}  // namespace rs

using namespace rs;

extern "C" {

int32_t rs_model_train_micro(rs_model* m, const int32_t* tokens, int32_t T, const int32_t* seg, int32_t S, const int32_t* parent,
                             const uint8_t* mask, const float* adv, const float* slp, const rs_loss_spec* spec, rs_loss_stats* stats,
                             float* token_logp, rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "train: null model");
  if (int32_t s = check_batch(m, tokens, T, seg, S, parent, err)) return s;
  if (int32_t s = check_loss_spec(spec, err)) return s;
  if (int32_t s = rs_shared::check_train_micro(spec, mask, adv, slp, stats, seg, S, parent, T, err)) return s;
  *stats = rs_loss_stats{};
  if (token_logp) std::fill(token_logp, token_logp + T, 0.f);
  // No loss token, no gradient: skip the work (the grads stay exactly as they were).
  if (std::find_if(mask, mask + T, [](uint8_t v) { return v != 0; }) == mask + T) return ok(err);
  try {
    if (!m->acts.ensure(m->d, T)) return fail(err, RS_ERR_OUT_OF_MEMORY, "train: out of memory for %d tokens of activations", T);
    prepare_positions(m, seg, parent, S, T);
    forward_layers(m, GemmImpl::Auto, tokens, T, nullptr, true);
    // The final-norm gradient reuses the MLP-output scratch, which the backward only needs afterwards.
    float* dlnf = m->acts.tmpD;
    head_and_loss(m, GemmImpl::Auto, tokens, T, mask, adv, slp, *spec, stats, token_logp, dlnf);
    const std::vector<float> aux_dp = aux_loss(m, T, mask, *spec, stats);
    backward_layers(m, GemmImpl::Auto, tokens, T, dlnf, aux_dp);
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "train: out of memory");
  }
  return ok(err);
}

}  // extern "C"
