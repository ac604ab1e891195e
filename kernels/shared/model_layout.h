// What both backends must agree on to be interchangeable behind kernels.h: the config checks every
// backend applies, the model's dimensions, and the flat parameter layout (HF names, order, shapes).
// One copy here, so a checkpoint written by one backend loads in the other.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "errors.h"

namespace rs_shared {

struct Dims {
  int V, D, I, L, H, KV, hd, QKV, maxPos;
  float eps;
  double theta;
  bool tied, bias, qkn;  // qkn: per-head q/k RMSNorm (Qwen3)
  int E = 0, K = 0, Im = 0;  // experts, experts per token, expert MLP width (E = 0: dense)
  bool norm_topk = false;
  float aux_coef = 0.f;
  int moe_layers = 0;  // how many layers hold a sparse block
  bool sigmoid_router = false;  // GLM-4-MoE routing (see kernels.h)
  int n_group = 1, topk_group = 1, Is = 0;  // Is: shared expert width (0 = none)
  float scale = 1.f;                        // routed_scaling_factor
  int rd = 0;                               // rotary dims per head (rd <= hd)
};

struct LayerOffsets {
  int64_t ln1, wqkv, bqkv, wo, ln2, wgu, wdown;  // bqkv = -1 without attention bias
  int64_t qn, kn;                                // q_norm / k_norm weights [hd]; -1 without qk_norm
  int64_t router, experts;                       // MoE: gate [E, D] and expert 0's gate_proj; -1 in a dense layer
  int64_t ebias, shared;                         // MoE: correction bias [E], shared expert's gate|up; -1 when absent
  // Expert e's gate|up [2Im, D] sits at experts + e * expert_size(d), its down [D, Im] 2 Im D after that.
};

inline int32_t check_moe_config(const rs_model_config* c, rs_error* err) {
  if (c->num_experts == 0) return RS_OK;
  if (c->num_experts < 0 || c->num_experts > 4096)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: numExperts must be in [0, 4096] (got %d)", c->num_experts);
  if (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->num_experts)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: numExpertsPerTok must be in [1, numExperts %d] (got %d)", c->num_experts,
                c->num_experts_per_tok);
  if (c->moe_intermediate_size < 1 || c->moe_intermediate_size > (1 << 29))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: moeIntermediateSize must be a positive integer (got %d)", c->moe_intermediate_size);
  if (c->norm_topk_prob != 0 && c->norm_topk_prob != 1)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: normTopkProb must be 0 or 1 (got %d)", c->norm_topk_prob);
  if (!(c->router_aux_loss_coef >= 0) || !std::isfinite(c->router_aux_loss_coef))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: routerAuxLossCoef must be a finite number >= 0 (got %g)", c->router_aux_loss_coef);
  if (c->moe_router != 0 && c->moe_router != 1)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: moeRouter must be 0 (softmax) or 1 (sigmoid) (got %d)", c->moe_router);
  const int groups = c->n_group > 1 ? c->n_group : 1;
  if (c->n_group < 0 || c->num_experts % groups || c->topk_group < 0 || c->topk_group > groups || (groups > 1 && c->topk_group < 1))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: nGroup %d must divide numExperts %d and topkGroup %d be in [1, nGroup]", c->n_group,
                c->num_experts, c->topk_group);
  if (groups > 1 && c->num_experts / groups < 2)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: every expert group needs 2 experts (its score is its 2 best)");
  if (!(c->routed_scaling_factor >= 0) || !std::isfinite(c->routed_scaling_factor))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: routedScalingFactor must be finite and >= 0 (got %g)", c->routed_scaling_factor);
  if (c->n_shared_experts < 0 || (int64_t)c->n_shared_experts * c->moe_intermediate_size > (1 << 29))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: nSharedExperts must be >= 0 and small enough (got %d)", c->n_shared_experts);
  if (c->moe_layers)
    for (int l = 0; l < c->num_layers; l++)
      if (c->moe_layers[l] > 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: moeLayers[%d] must be 0 or 1 (got %d)", l, c->moe_layers[l]);
  return RS_OK;
}

inline int64_t expert_size(const Dims& d) { return 3LL * d.Im * d.D; }
inline bool is_moe_layer(const rs_model_config& c, int l) { return c.num_experts > 0 && (!c.moe_layers || c.moe_layers[l]); }

// The checks every backend applies; a backend may add its own limits after these.
inline int32_t check_model_config(const rs_model_config* c, rs_error* err) {
  if (!c) return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: null");
  struct {
    const char* name;
    int32_t v;
  } pos[] = {{"vocabSize", c->vocab_size}, {"hiddenSize", c->hidden_size}, {"intermediateSize", c->intermediate_size},
             {"numLayers", c->num_layers}, {"numHeads", c->num_heads}, {"numKvHeads", c->num_kv_heads},
             {"maxPositionEmbeddings", c->max_position_embeddings}};
  for (auto& p : pos)
    if (p.v < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: %s must be a positive integer (got %d)", p.name, p.v);
  if (c->head_dim < 0) return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: headDim must be >= 0 (got %d; 0 = hiddenSize/numHeads)", c->head_dim);
  if (c->qk_norm != 0 && c->qk_norm != 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: qkNorm must be 0 or 1 (got %d)", c->qk_norm);
  if (c->head_dim == 0 && c->hidden_size % c->num_heads)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: hiddenSize %d is not divisible by numHeads %d", c->hidden_size, c->num_heads);
  if (c->head_dim == 0 && (c->hidden_size / c->num_heads) % 2)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: head dim %d/%d = %d must be even for RoPE", c->hidden_size, c->num_heads,
                c->hidden_size / c->num_heads);
  if (c->head_dim % 2) return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: headDim %d must be even for RoPE", c->head_dim);
  {
    const int hd = c->head_dim > 0 ? c->head_dim : c->hidden_size / c->num_heads;
    if (c->rotary_dim < 0 || c->rotary_dim > hd || c->rotary_dim % 2)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: rotaryDim must be even and in [0, head dim %d] (got %d)", hd, c->rotary_dim);
  }
  if ((int64_t)c->head_dim * (c->num_heads + 2LL * c->num_kv_heads) > (1LL << 30))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: headDim * (numHeads + 2 numKvHeads) is too large");
  if (c->num_heads % c->num_kv_heads)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: numHeads %d is not divisible by numKvHeads %d", c->num_heads, c->num_kv_heads);
  if (!(c->rms_norm_eps > 0) || !std::isfinite(c->rms_norm_eps))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: rmsNormEps must be a positive finite number (got %g)", c->rms_norm_eps);
  if (!(c->rope_theta > 0) || !std::isfinite(c->rope_theta))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: ropeTheta must be a positive finite number (got %g)", c->rope_theta);
  if (c->threads < 0 || c->threads > 4096)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: threads must be in [0, 4096] (got %d)", c->threads);
  // Keep every per-row product inside int32 (gemm dimensions) and the model inside a sane size.
  const int64_t widest = std::max<int64_t>({(int64_t)c->vocab_size, 2LL * c->intermediate_size, 3LL * c->hidden_size});
  if (widest > (1LL << 30)) return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: a dimension is too large");
  if (c->max_position_embeddings > (1 << 24)) return fail(err, RS_ERR_INVALID_ARGUMENT, "model config: maxPositionEmbeddings above 2^24");
  return check_moe_config(c, err);
}

inline Dims dims_of(const rs_model_config& c) {
  Dims d{};
  d.V = c.vocab_size;
  d.D = c.hidden_size;
  d.I = c.intermediate_size;
  d.L = c.num_layers;
  d.H = c.num_heads;
  d.KV = c.num_kv_heads;
  d.hd = c.head_dim > 0 ? c.head_dim : d.D / d.H;
  d.QKV = (d.H + 2 * d.KV) * d.hd;
  d.maxPos = c.max_position_embeddings;
  d.eps = c.rms_norm_eps;
  d.theta = c.rope_theta;
  d.tied = c.tie_word_embeddings != 0;
  d.bias = c.attention_bias != 0;
  d.qkn = c.qk_norm != 0;
  d.rd = c.rotary_dim > 0 ? c.rotary_dim : d.hd;
  if (c.num_experts > 0) {
    d.sigmoid_router = c.moe_router == 1;
    d.n_group = c.n_group > 1 ? c.n_group : 1;
    d.topk_group = d.n_group > 1 ? c.topk_group : 1;
    d.scale = c.routed_scaling_factor > 0 ? c.routed_scaling_factor : 1.f;
    d.Is = c.n_shared_experts * c.moe_intermediate_size;
    d.E = c.num_experts;
    d.K = c.num_experts_per_tok;
    d.Im = c.moe_intermediate_size;
    d.norm_topk = c.norm_topk_prob != 0;
    d.aux_coef = c.router_aux_loss_coef;
    for (int l = 0; l < d.L; l++) d.moe_layers += is_moe_layer(c, l) ? 1 : 0;
  }
  return d;
}

// Fills m->tensors, m->lo, m->off_embed / off_norm / off_head and m->n_params from m->d. q/k/v and
// gate/up sit next to each other so each pair runs as one matmul.
// moe: which layers hold a sparse block (rs_model_config.moe_layers, read at create; empty = none).
template <class Model>
void build_layout(Model* m, const std::vector<uint8_t>& moe) {
  const Dims& d = m->d;
  int64_t off = 0;
  auto add = [&](const std::string& name, int64_t r, int64_t c, bool decay) {
    rs_tensor_info t{};
    std::snprintf(t.name, sizeof(t.name), "%s", name.c_str());
    t.offset = off;
    t.ndim = c > 0 ? 2 : 1;
    t.shape[0] = r;
    t.shape[1] = c > 0 ? c : 0;
    t.size = c > 0 ? r * c : r;
    t.weight_decay = decay ? 1 : 0;
    m->tensors.push_back(t);
    off += t.size;
    return t.offset;
  };
  const int64_t hq = (int64_t)d.H * d.hd, hk = (int64_t)d.KV * d.hd;
  m->off_embed = add("model.embed_tokens.weight", d.V, d.D, true);
  for (int l = 0; l < d.L; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerOffsets o{};
    o.ln1 = add(p + "input_layernorm.weight", d.D, 0, false);
    o.wqkv = add(p + "self_attn.q_proj.weight", hq, d.D, true);
    add(p + "self_attn.k_proj.weight", hk, d.D, true);
    add(p + "self_attn.v_proj.weight", hk, d.D, true);
    o.bqkv = -1;
    if (d.bias) {
      o.bqkv = add(p + "self_attn.q_proj.bias", hq, 0, false);
      add(p + "self_attn.k_proj.bias", hk, 0, false);
      add(p + "self_attn.v_proj.bias", hk, 0, false);
    }
    o.wo = add(p + "self_attn.o_proj.weight", d.D, hq, true);
    o.qn = o.kn = -1;
    if (d.qkn) {
      o.qn = add(p + "self_attn.q_norm.weight", d.hd, 0, false);
      o.kn = add(p + "self_attn.k_norm.weight", d.hd, 0, false);
    }
    o.ln2 = add(p + "post_attention_layernorm.weight", d.D, 0, false);
    o.router = o.experts = o.wgu = o.wdown = o.ebias = o.shared = -1;
    if (!moe.empty() && moe[l]) {
      o.router = add(p + "mlp.gate.weight", d.E, d.D, true);
      if (d.sigmoid_router) o.ebias = add(p + "mlp.gate.e_score_correction_bias", d.E, 0, false);
      if (d.Is > 0) {
        o.shared = add(p + "mlp.shared_experts.gate_proj.weight", d.Is, d.D, true);
        add(p + "mlp.shared_experts.up_proj.weight", d.Is, d.D, true);
        add(p + "mlp.shared_experts.down_proj.weight", d.D, d.Is, true);
      }
      for (int e = 0; e < d.E; e++) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        const int64_t g = add(x + "gate_proj.weight", d.Im, d.D, true);
        if (e == 0) o.experts = g;
        add(x + "up_proj.weight", d.Im, d.D, true);
        add(x + "down_proj.weight", d.D, d.Im, true);
      }
    } else {
      o.wgu = add(p + "mlp.gate_proj.weight", d.I, d.D, true);
      add(p + "mlp.up_proj.weight", d.I, d.D, true);
      o.wdown = add(p + "mlp.down_proj.weight", d.D, d.I, true);
    }
    m->lo.push_back(o);
  }
  m->off_norm = add("model.norm.weight", d.D, 0, false);
  m->off_head = d.tied ? m->off_embed : add("lm_head.weight", d.V, d.D, true);
  m->n_params = off;
}

}  // namespace rs_shared

namespace rs_shared {
// Which layers hold a sparse block, from the config (moe_layers or every layer when experts are on).
inline std::vector<uint8_t> moe_layer_flags(const rs_model_config& c) {
  std::vector<uint8_t> f;
  if (c.num_experts > 0)
    for (int l = 0; l < c.num_layers; l++) f.push_back(is_moe_layer(c, l) ? 1 : 0);
  return f;
}
}  // namespace rs_shared
