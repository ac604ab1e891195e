// Mixture-of-experts routing, one copy for both backends (host code): per token, the router logits become
// probabilities (softmax, Qwen3-MoE) or sigmoid scores (GLM-4-MoE), the top-k choice and the picks' weights; the
// backward of that map; the grouping of picks by expert; and the load-balancing loss. The CPU backend runs it on
// its own rows, the CUDA backend on the router logits it downloads, so both choose the same experts for the same
// logits (ties to the lower expert) and the choice never depends on the backend's reduction order.
// Reference: transformers modeling_qwen3_moe.py at 00d4b3d2 (Qwen3MoeSparseMoeBlock, load_balancing_loss_func),
// modeling_glm4_moe.py at 000c33fd (Glm4MoeMoE.route_tokens_to_experts).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model_layout.h"

namespace rs_shared {

// The top-k of c (ties: the lower index first).
inline void moe_top_k(const float* c, int E, int K, int32_t* sel) {
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
inline void moe_route_softmax(float* p, int E, int K, bool norm, int32_t* sel, float* w) {
  float mx = p[0];
  for (int e = 1; e < E; e++) mx = std::max(mx, p[e]);
  double sum = 0;
  for (int e = 0; e < E; e++) sum += (p[e] = std::exp(p[e] - mx));
  const float inv = (float)(1.0 / sum);
  for (int e = 0; e < E; e++) p[e] *= inv;
  moe_top_k(p, E, K, sel);
  for (int k = 0; k < K; k++) w[k] = p[sel[k]];
  if (!norm) return;
  float s = 0.f;
  for (int k = 0; k < K; k++) s += w[k];
  for (int k = 0; k < K; k++) w[k] /= s;
}

// Sigmoid scores in place; the choice on scores + bias inside the best topk_group groups (a group's score: the sum
// of its two best; experts of other groups score 0, as transformers' masked_fill does); weights from the scores.
inline void moe_route_sigmoid(const Dims& d, float* p, const float* bias, int32_t* sel, float* w) {
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
      moe_top_k(c.data() + g * per, per, 2, two);
      gs[g] = c[g * per + two[0]] + c[g * per + two[1]];
    }
    std::vector<int32_t> keep(d.topk_group);
    moe_top_k(gs.data(), G, d.topk_group, keep.data());
    for (int g = 0; g < G; g++)
      if (std::find(keep.begin(), keep.end(), g) == keep.end()) std::fill(c.begin() + g * per, c.begin() + (g + 1) * per, 0.f);
  }
  moe_top_k(c.data(), E, K, sel);
  float s = 0.f;
  for (int k = 0; k < K; k++) s += (w[k] = p[sel[k]]);
  for (int k = 0; k < K; k++) w[k] = (d.norm_topk ? w[k] / (s + 1e-20f) : w[k]) * d.scale;
}

// One token's routing: p [E] holds its router logits on entry and its probabilities (or scores) on return.
inline void moe_route_row(const Dims& d, float* p, const float* ebias, int32_t* sel, float* w) {
  if (d.sigmoid_router) moe_route_sigmoid(d, p, ebias, sel, w);
  else moe_route_softmax(p, d.E, d.K, d.norm_topk, sel, w);
}

// Picks grouped by expert: eoff [E + 1] the first grouped row of each expert, slot [T K] the grouped row of each
// pick, in (token, pick) order within an expert.
inline void moe_group_picks(const int32_t* sel, int T, int E, int K, std::vector<int32_t>& eoff, std::vector<int32_t>& slot) {
  eoff.assign(E + 1, 0);
  for (int i = 0; i < T * K; i++) eoff[sel[i] + 1]++;
  for (int e = 0; e < E; e++) eoff[e + 1] += eoff[e];
  std::vector<int32_t> cur(eoff.begin(), eoff.end() - 1);
  slot.resize((size_t)T * K);
  for (int i = 0; i < T * K; i++) slot[i] = cur[sel[i]]++;
}

// Sigmoid routing: dL/dscore of the picks through the renormalisation and scaling, then the sigmoid. The choice
// (bias, groups) is piecewise constant: no gradient.
inline void moe_sigmoid_row_bwd(const Dims& d, const float* p, const int32_t* sel, const float* dw, float* dl) {
  const int E = d.E, K = d.K;
  std::fill(dl, dl + E, 0.f);
  float s = 0.f, udw = 0.f;
  for (int k = 0; k < K; k++) s += p[sel[k]];
  const float den = s + 1e-20f;
  for (int k = 0; k < K; k++) udw += dw[k] * p[sel[k]] / den;
  for (int k = 0; k < K; k++) dl[sel[k]] = d.norm_topk ? d.scale / den * (dw[k] - udw) : d.scale * dw[k];
  for (int e = 0; e < E; e++) dl[e] *= p[e] * (1.f - p[e]);
}

// Softmax routing: dL/dp for one token from the pick weights (through the renormalisation) and the aux loss; then
// the softmax, so dp ends as dL/dlogit.
inline void moe_softmax_row_bwd(const float* p, const int32_t* sel, const float* w, const float* dw, int E, int K, bool norm,
                                const std::vector<float>& aux_dp, float* dp) {
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

// dL/dlogit [E] of one token from dL/dw of its picks (and, softmax routing only, the aux loss's dL/dp).
inline void moe_route_row_bwd(const Dims& d, const float* p, const int32_t* sel, const float* w, const float* dw,
                              const std::vector<float>& aux_dp, float* dl) {
  if (d.sigmoid_router) moe_sigmoid_row_bwd(d, p, sel, dw, dl);
  else moe_softmax_row_bwd(p, sel, w, dw, d.E, d.K, d.norm_topk, aux_dp, dl);
}

// Tallies of one layer for the load-balancing loss: picks per expert and the sum of each expert's probability over
// the layer's T tokens (token order), added into counts [E] and sums [E].
inline void moe_aux_tally(const int32_t* sel, const float* probs, int T, int E, int K, std::vector<double>& counts, std::vector<double>& sums) {
  for (int i = 0; i < T * K; i++) counts[sel[i]] += 1;
  for (int t = 0; t < T; t++)
    for (int e = 0; e < E; e++) sums[e] += probs[(size_t)t * E + e];
}

// The Switch-Transformer load-balancing loss from the tallies of every MoE layer of a row of T tokens
// (transformers' load_balancing_loss_func: E sum_e f_e P_e, f_e the share of picks and P_e the mean probability of
// expert e over all layers' tokens), times coef * loss_tokens / normalizer. Returns that loss; dp [E] receives
// dLoss/dp per expert (the same for every token and layer; f is piecewise constant).
inline double moe_aux_loss(const Dims& d, const std::vector<double>& picks, const std::vector<double>& probs, int T, double loss_tokens,
                           double normalizer, std::vector<float>& dp) {
  const double N = (double)d.moe_layers * T, scale = d.aux_coef * loss_tokens / normalizer;
  double aux = 0;
  dp.assign(d.E, 0.f);
  for (int e = 0; e < d.E; e++) {
    aux += (picks[e] / N) * (probs[e] / N);
    dp[e] = (float)(scale * d.E * (picks[e] / N) / N);
  }
  return scale * d.E * aux;
}

}  // namespace rs_shared
