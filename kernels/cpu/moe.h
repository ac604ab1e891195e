// The mixture-of-experts MLP block (routing math in ../shared/moe_route.h, shared with the CUDA backend) (Qwen3-MoE's Qwen3MoeSparseMoeBlock, transformers modeling_qwen3_moe.py at
// 00d4b3d2): router logits x Wg^T, softmax over the experts in f32, the top-k picks (ties to the lower expert),
// their probabilities renormalised when norm_topk_prob, each pick's SwiGLU expert, the picks' outputs summed
// with those weights in pick order. Picks are grouped by expert so each expert runs one matmul over its rows.
// GLM-4-MoE (modeling_glm4_moe.py at 000c33fd, Glm4MoeMoE.route_tokens_to_experts): sigmoid scores, the choice on
// scores + correction bias within the best topk_group groups, weights from the scores (renormalised + 1e-20) times
// routed_scaling_factor, plus a shared expert on every token. `probs` then holds the sigmoid scores.
#pragma once
#include <cstdint>
#include <vector>

#include "common.h"
#include "ops.h"
#include "../shared/model_layout.h"

namespace rs {

// One MoE layer's routing and grouped activations for T tokens (kept for the backward).
struct MoeBuf {
  std::vector<float> probs;   // [T, E] softmax of the router logits
  std::vector<float> w;       // [T, K] weight of each pick
  std::vector<int32_t> sel;   // [T, K] expert of each pick
  std::vector<int32_t> slot;  // [T, K] row of each pick in the grouped arrays
  std::vector<int32_t> eoff;  // [E + 1] first grouped row of each expert
  std::vector<float> x, gu, hm, y;  // grouped rows: input [TK, D], gate|up [TK, 2Im], SwiGLU [TK, Im], expert out [TK, D]
  std::vector<float> sgu, shm, sy;  // shared expert (GLM-4-MoE): gate|up [T, 2Is], SwiGLU [T, Is], out [T, D]
};

// Backward scratch, shared by the layers.
struct MoeScratch {
  std::vector<float> dy, dhm, dgu, dx, dp;
};

struct MoeArgs {
  const rs_shared::Dims& d;
  const rs_shared::LayerOffsets& o;
  const float* P;
  GemmImpl impl;
  int nt;
};

// out [T, D] = the block's output for x [T, D] (the post-attention-normed rows).
void moe_fwd(const MoeArgs& a, const float* x, int T, MoeBuf& b, float* out);

// The gradient of the block: dx [T, D] is overwritten with dL/dx; the router's and experts' weight gradients are
// added into G. aux_dp [E]: the load-balancing loss's gradient with respect to each probability of this layer
// (empty = no aux loss).
void moe_bwd(const MoeArgs& a, const float* x, int T, const MoeBuf& b, const float* dout, const std::vector<float>& aux_dp, MoeScratch& s,
             float* G, float* dx);

}  // namespace rs
