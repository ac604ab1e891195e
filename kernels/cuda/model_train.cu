// One packed micro-batch: forward, the LM head + fused loss on the loss rows only (in row chunks, so the
// [rows, vocab] logits never exist for the whole row), then the backward through every layer, accumulating
// into the flat gradient buffer. The same sequence of operations as the CPU backend's model_train.cpp.
#include <algorithm>
#include <cmath>

#include "model.cuh"
#include "../shared/moe_route.h"

namespace rsc {

namespace {

// LM head + loss for the rows that predict a loss token. dlnf receives the gradient of the final-norm output.
void head_and_loss(rs_model* m, const int32_t* tokens, int T, const uint8_t* mask, const float* adv, const float* slp, const rs_loss_spec& spec,
                   rs_loss_stats* stats, float* token_logp, float* dlnf) {
  const Dims& d = m->d;
  cudaStream_t s = m->stream;
  HeadBufs& hb = m->head;
  const float* W = m->P() + m->off_head;
  const bf16* Wb = m->Wb(m->off_head);
  float* dW = m->G() + m->off_head;
  zero_async(dlnf, sizeof(float) * (size_t)T * d.D, s, "zeroing the final-norm gradient");

  std::vector<int32_t> rows, src, tgt;  // predicted token t is read from hidden row m->row.src[t]
  std::vector<float> adv_c, slp_c;
  const bool policy = rs_shared::loss_uses_policy(spec.kind);
  for (int t = 0; t < T; t++)
    if (mask[t]) {
      rows.push_back(t);
      src.push_back(m->row.src[t]);
      tgt.push_back(tokens[t]);
      if (policy) {
        adv_c.push_back(adv[t]);
        slp_c.push_back(slp[t]);
      }
    }
  const int n_rows = (int)rows.size();
  if (n_rows == 0) return;
  const int R = std::min(n_rows, head_chunk_rows(d));
  upload(hb.idx, src.data(), src.size(), s, "loss rows");
  upload(hb.tgt, tgt.data(), tgt.size(), s, "loss targets");
  if (policy) {
    upload(hb.adv, adv_c.data(), adv_c.size(), s, "advantages");
    upload(hb.slp, slp_c.data(), slp_c.size(), s, "sampler logprobs");
  }
  hb.token_lp.reserve((size_t)n_rows, "token logprobs");
  hb.row_out.reserve((size_t)n_rows * kLossRowOut, "loss row results");
  hb.X.reserve((size_t)R * d.D, "LM-head input chunk");
  hb.dX.reserve((size_t)R * d.D, "LM-head input-gradient chunk");
  hb.logits.reserve((size_t)R * d.V, "LM-head logits");
  hb.ones.reserve((size_t)R, "loss mask");
  check_cuda(cudaMemsetAsync(hb.ones.p, 1, (size_t)R, s), "loss mask");

  for (int c0 = 0; c0 < n_rows; c0 += R) {
    const int n = std::min(R, n_rows - c0);
    gather_rows(s, m->acts.lnf, d.D, hb.idx.p + c0, n, d.D, hb.X.p);
    linear_fwd(m->gemm, hb.X.p, n, d.D, W, Wb, d.V, nullptr, hb.logits.p, false, "lm_head");
    loss_rows(s, hb.logits.p, n, d.V, hb.tgt.p + c0, hb.ones.p, policy ? hb.adv.p + c0 : nullptr, policy ? hb.slp.p + c0 : nullptr, spec,
              hb.logits.p, hb.token_lp.p + c0, hb.row_out.p + (size_t)c0 * kLossRowOut);
    linear_bwd_dx(m->gemm, hb.logits.p, n, d.V, W, Wb, d.D, 0.f, hb.dX.p, "lm_head dx");
    linear_bwd_dw(m->gemm, hb.logits.p, hb.X.p, n, d.D, d.V, dW, "lm_head dW");
    // Added in row order, not copied: a parent's last row predicts the first token of each of its children.
    hb.scatter.build(src.data() + c0, n, s);
    embedding_bwd(s, hb.dX.p, d.D, hb.scatter, dlnf);
  }
  std::vector<double> row_out((size_t)n_rows * kLossRowOut);
  std::vector<float> lp((size_t)n_rows);
  to_host(row_out.data(), hb.row_out.p, row_out.size() * sizeof(double), s, "loss row results");
  to_host(lp.data(), hb.token_lp.p, lp.size() * sizeof(float), s, "token logprobs");
  loss_accumulate(row_out.data(), n_rows, stats);
  if (token_logp)
    for (int i = 0; i < n_rows; i++) token_logp[rows[i]] = lp[i];
}

// The load-balancing loss over every MoE layer of the row (rs_shared::moe_aux_loss, from the host routing of the
// forward), added to stats->loss; returns dLoss/dp per expert. Empty when the model has no aux loss.
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
void mlp_bwd(rs_model* m, int l, int T, const float* dout, const std::vector<float>& aux_dp) {
  const Dims& d = m->d;
  Acts& a = m->acts;
  Acts::Layer& y = a.layers[l];
  const LayerOffsets& o = m->lo[l];
  if (o.router >= 0) return moe_bwd(m, l, y.ln2, T, a.moe[l], dout, aux_dp, a.moe_scratch, a.dln);
  const float* P = m->P();
  float* G = m->G();
  GemmCtx& g = m->gemm;
  linear_bwd_dx(g, dout, T, d.D, P + o.wdown, m->Wb(o.wdown), d.I, 0.f, a.dhm, "down_proj dx");
  linear_bwd_dw(g, dout, y.hm, T, d.I, d.D, G + o.wdown, "down_proj dW");
  swiglu_bwd(m->stream, a.dhm, d.I, y.gu, y.gu + d.I, 2 * (int64_t)d.I, a.dgu, a.dgu + d.I, 2 * (int64_t)d.I, T, d.I);
  linear_bwd_dx(g, a.dgu, T, 2 * d.I, P + o.wgu, m->Wb(o.wgu), d.D, 0.f, a.dln, "gate_up_proj dx");
  linear_bwd_dw(g, a.dgu, y.ln2, T, d.D, 2 * d.I, G + o.wgu, "gate_up_proj dW");
}

void backward_layers(rs_model* m, const int32_t* tokens, int T, const float* dlnf, const std::vector<float>& aux_dp) {
  const Dims& d = m->d;
  Acts& a = m->acts;
  const float* P = m->P();
  float* G = m->G();
  cudaStream_t s = m->stream;
  GemmCtx& g = m->gemm;
  const int A = d.H * d.hd, KVD = d.KV * d.hd;

  rmsnorm_bwd(s, dlnf, a.X[d.L], P + m->off_norm, a.rstdf, T, d.D, nullptr, a.dres, G + m->off_norm, m->part);
  for (int l = d.L - 1; l >= 0; l--) {
    const LayerOffsets& o = m->lo[l];
    Acts::Layer& y = a.layers[l];
    // a.dres = dLoss/dX[l+1], which is also the gradient of the MLP output.
    mlp_bwd(m, l, T, a.dres, aux_dp);
    rmsnorm_bwd(s, a.dln, y.xmid, P + o.ln2, y.rstd2, T, d.D, a.dres, a.dres, G + o.ln2, m->part);
    // a.dres = dLoss/dxmid, also the gradient of the attention output projection.
    linear_bwd_dx(g, a.dres, T, d.D, P + o.wo, m->Wb(o.wo), A, 0.f, a.datt, "o_proj dx");
    linear_bwd_dw(g, a.dres, y.att, T, A, d.D, G + o.wo, "o_proj dW");
    const AttnArgs ad{T, d.H, d.KV, d.hd, y.qkv, d.QKV, y.qkv + A, d.QKV, y.qkv + A + KVD, d.QKV, A, a.tiles.p, a.n_tiles, a.prefix.p};
    attention_bwd(s, ad, y.att, y.lse, a.datt, a.dqkv, a.dqkv + A, a.dqkv + A + KVD, a.delta);
    rope_apply(s, a.dqkv, T, d.QKV, d.H, d.hd, a.pos, m->rope, true);
    rope_apply(s, a.dqkv + A, T, d.QKV, d.KV, d.hd, a.pos, m->rope, true);
    qk_norm_bwd(m, l, a.dqkv, T);
    linear_bwd_dx(g, a.dqkv, T, d.QKV, P + o.wqkv, m->Wb(o.wqkv), d.D, 0.f, a.dln, "qkv_proj dx");
    linear_bwd_dw(g, a.dqkv, y.ln1, T, d.D, d.QKV, G + o.wqkv, "qkv_proj dW");
    if (o.bqkv >= 0) colsum_accumulate(s, a.dqkv, T, d.QKV, d.QKV, G + o.bqkv, m->part);
    rmsnorm_bwd(s, a.dln, a.X[l], P + o.ln1, y.rstd1, T, d.D, a.dres, a.dres, G + o.ln1, m->part);
  }
  m->emb_plan.build(tokens, T, s);
  embedding_bwd(s, a.dres, d.D, m->emb_plan, G + m->off_embed);
}

}  // namespace

}  // namespace rsc

using namespace rsc;

extern "C" {

int32_t rs_model_train_micro(rs_model* m, const int32_t* tokens, int32_t T, const int32_t* seg, int32_t S, const int32_t* parent,
                             const uint8_t* mask, const float* adv, const float* slp, const rs_loss_spec* spec, rs_loss_stats* stats,
                             float* token_logp, rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "train: null model");
  if (int32_t st = check_batch(m, tokens, T, seg, S, parent, err)) return st;
  if (int32_t st = check_loss_spec(spec, err)) return st;
  if (int32_t st = rs_shared::check_train_micro(spec, mask, adv, slp, stats, seg, S, parent, T, err)) return st;
  *stats = rs_loss_stats{};
  if (token_logp) std::fill(token_logp, token_logp + T, 0.f);
  // No loss token, no gradient: skip the work (the grads stay exactly as they were).
  if (std::find_if(mask, mask + T, [](uint8_t v) { return v != 0; }) == mask + T) return ok(err);
  return guard(err, "train", [&] {
    model_enter(m);
    prepare_row(m, tokens, T, seg, S, parent);
    forward_layers(m, T, false, nullptr);
    // The final-norm gradient reuses the MLP-output scratch, which the backward only needs afterwards.
    float* dlnf = m->acts.tmpD;
    model_touched(m, kGrads);
    head_and_loss(m, tokens, T, mask, adv, slp, *spec, stats, token_logp, dlnf);
    const std::vector<float> aux_dp = aux_loss(m, T, mask, *spec, stats);
    backward_layers(m, tokens, T, dlnf, aux_dp);
    sync_stream(m->stream, "train");
  });
}

}  // extern "C"
