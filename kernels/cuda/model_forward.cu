// The decoder forward over one packed row, and rs_model_forward (logits for every token).
#include <algorithm>

#include "model.cuh"

namespace rsc {

void forward_layers(rs_model* m, int T, bool row_independent, const KvSink* sink) {
  const Dims& d = m->d;
  Acts& a = m->acts;
  const float* P = m->P();
  cudaStream_t s = m->stream;
  GemmCtx& g = m->gemm;
  const int A = d.H * d.hd, KVD = d.KV * d.hd;

  embedding_fwd(s, P + m->off_embed, d.D, a.tokens, T, a.X[0]);
  rmsnorm_fwd(s, a.X[0], nullptr, P + m->lo[0].ln1, T, d.D, d.eps, nullptr, a.layers[0].ln1, a.layers[0].rstd1);
  for (int l = 0; l < d.L; l++) {
    const LayerOffsets& o = m->lo[l];
    Acts::Layer& y = a.layers[l];
    // q|k|v in one product: their weights (and biases) are adjacent in the layout.
    linear_fwd(g, y.ln1, T, d.D, P + o.wqkv, m->Wb(o.wqkv), d.QKV, o.bqkv >= 0 ? P + o.bqkv : nullptr, y.qkv, row_independent, "qkv_proj");
    qk_norm_fwd(m, l, y.qkv, T, y.qk_raw, y.qk_rstd);
    rope_apply(s, y.qkv, T, d.QKV, d.H, d.hd, a.pos, m->rope, false);
    rope_apply(s, y.qkv + A, T, d.QKV, d.KV, d.hd, a.pos, m->rope, false);
    if (sink) (*sink)(l, y.qkv + A, y.qkv + A + KVD, d.QKV);
    const AttnArgs ad{T, d.H, d.KV, d.hd, y.qkv, d.QKV, y.qkv + A, d.QKV, y.qkv + A + KVD, d.QKV, A, a.tiles.p, a.n_tiles, a.prefix.p};
    attention_fwd(s, ad, y.att, y.lse);
    linear_fwd(g, y.att, T, A, P + o.wo, m->Wb(o.wo), d.D, nullptr, a.tmpD, row_independent, "o_proj");
    rmsnorm_fwd(s, a.X[l], a.tmpD, P + o.ln2, T, d.D, d.eps, y.xmid, y.ln2, y.rstd2);
    mlp_fwd(m, l, y.ln2, T, y.gu, y.hm, a.moe[l], a.tmpD, row_independent);
    const bool last = l + 1 == d.L;
    rmsnorm_fwd(s, y.xmid, a.tmpD, P + (last ? m->off_norm : m->lo[l + 1].ln1), T, d.D, d.eps, a.X[l + 1], last ? a.lnf : a.layers[l + 1].ln1,
                last ? a.rstdf : a.layers[l + 1].rstd1);
  }
}

void mlp_fwd(rs_model* m, int l, const float* x, int T, float* gu, float* hm, MoeDev& moe, float* out, bool row_independent) {
  const Dims& d = m->d;
  const LayerOffsets& o = m->lo[l];
  if (o.router >= 0) return moe_fwd(m, l, x, T, moe, out, row_independent);
  const float* P = m->P();
  linear_fwd(m->gemm, x, T, d.D, P + o.wgu, m->Wb(o.wgu), 2 * d.I, nullptr, gu, row_independent, "gate_up_proj");
  swiglu_fwd(m->stream, gu, gu + d.I, 2 * (int64_t)d.I, hm, d.I, T, d.I);
  linear_fwd(m->gemm, hm, T, d.I, P + o.wdown, m->Wb(o.wdown), d.D, nullptr, out, row_independent, "down_proj");
}

void qk_norm_fwd(rs_model* m, int l, float* qkv, int T, float* raw, float* rstd) {
  const Dims& d = m->d;
  const LayerOffsets& o = m->lo[l];
  if (o.qn < 0) return;
  const int A = d.H * d.hd, QK = A + d.KV * d.hd, R = d.H + d.KV;
  const float* P = m->P();
  head_rmsnorm_fwd(m->stream, qkv, T, d.QKV, d.H, d.hd, P + o.qn, d.eps, raw, QK, rstd, R);
  head_rmsnorm_fwd(m->stream, qkv + A, T, d.QKV, d.KV, d.hd, P + o.kn, d.eps, raw ? raw + A : nullptr, QK, rstd ? rstd + d.H : nullptr, R);
}

void qk_norm_bwd(rs_model* m, int l, float* dqkv, int T) {
  const Dims& d = m->d;
  const LayerOffsets& o = m->lo[l];
  if (o.qn < 0) return;
  const Acts::Layer& y = m->acts.layers[l];
  const int A = d.H * d.hd, QK = A + d.KV * d.hd, R = d.H + d.KV;
  const float* P = m->P();
  float* G = m->G();
  head_rmsnorm_bwd(m->stream, dqkv, T, d.QKV, d.H, d.hd, P + o.qn, y.qk_raw, QK, y.qk_rstd, R, G + o.qn, m->part);
  head_rmsnorm_bwd(m->stream, dqkv + A, T, d.QKV, d.KV, d.hd, P + o.kn, y.qk_raw + A, QK, y.qk_rstd + d.H, R, G + o.kn, m->part);
}

}  // namespace rsc

using namespace rsc;

extern "C" {

int32_t rs_model_forward(rs_model* m, const int32_t* tokens, int32_t T, const int32_t* seg, int32_t S, const int32_t* parent, float* logits,
                         rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "forward: null model");
  if (int32_t st = check_batch(m, tokens, T, seg, S, parent, err)) return st;
  if (!logits) return fail(err, RS_ERR_INVALID_ARGUMENT, "forward: null logits output");
  return guard(err, "forward", [&] {
    model_enter(m);
    prepare_row(m, tokens, T, seg, S, parent);
    forward_layers(m, T, false, nullptr);
    // The LM head in row chunks, so [T, V] logits never sit in GPU memory at once.
    const Dims& d = m->d;
    const int R = std::min(T, head_chunk_rows(d));
    m->head.logits.reserve((size_t)R * d.V, "LM-head logits");
    for (int r0 = 0; r0 < T; r0 += R) {
      const int n = std::min(R, T - r0);
      linear_fwd(m->gemm, m->acts.lnf + (int64_t)r0 * d.D, n, d.D, m->P() + m->off_head, m->Wb(m->off_head), d.V, nullptr, m->head.logits.p,
                 false, "lm_head");
      to_host(logits + (int64_t)r0 * d.V, m->head.logits.p, sizeof(float) * (size_t)n * d.V, m->stream, "forward logits");
    }
    sync_stream(m->stream, "forward");
  });
}

}  // extern "C"
