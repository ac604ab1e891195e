// The mixture-of-experts MLP block on the GPU, the CUDA twin of cpu/moe.cpp (Qwen3-MoE softmax routing with
// norm_topk_prob; GLM-4-MoE sigmoid routing with e_score_correction_bias, n_group/topk_group, routed_scaling_factor
// and a shared expert). Plain kernels, no grouped GEMM:
//   router logits x Wg^T in fp32 (our own row-independent kernel, whatever the math mode, so the choice of experts
//   is the same in training, prefill and decode) -> downloaded -> routed on the host by ../shared/moe_route.h (the
//   CPU backend's code) -> picks grouped by expert, uploaded -> a gather of each expert's rows -> per expert, the
//   gate|up product, SwiGLU and the down product through the model's GEMM (cuBLAS when loaded) -> a combine kernel
//   that sums each token's picks with their weights in pick order (+ the shared expert).
// The backward mirrors it: dy and dL/dw of every pick from one kernel, each expert's products, the picks' input
// gradients summed back per token, dL/dw downloaded for the router's backward on the host, dL/dlogit uploaded for
// the router's weight and input gradients. One host round trip per MoE layer in each direction.
#pragma once
#include <vector>

#include "common.cuh"
#include "../shared/model_layout.h"

struct rs_model;

namespace rsc {

// One MoE layer's routing (host) and grouped activations (device) for T tokens, kept for the backward.
struct MoeDev {
  std::vector<float> probs;                        // [T, E] router probabilities (sigmoid scores for GLM)
  std::vector<float> w;                            // [T, K] weight of each pick
  std::vector<int32_t> sel, slot, eoff, row_tok;   // [T K] expert, grouped row of each pick; [E + 1]; [T K] token of each grouped row
  std::vector<float> ebias;                        // [E] the correction bias, downloaded for the routing
  DevBuf<float> logits, w_d;                       // router logits [T, E]; pick weights [T K]
  DevBuf<int32_t> ints;                            // slot [T K] | row_tok [T K]
  DevBuf<float> x, gu, hm, y;                      // grouped rows: input [TK, D], gate|up [TK, 2Im], SwiGLU [TK, Im], out [TK, D]
  DevBuf<float> sgu, shm, sy;                      // shared expert: gate|up [T, 2Is], SwiGLU [T, Is], out [T, D]
};

// Backward scratch, shared by the layers.
struct MoeScratchDev {
  DevBuf<float> dy, dhm, dgu, dx, dw, dp;
  std::vector<float> dw_host, dp_host;
};

// out [T, D] = the block's output for x [T, D] (device; the post-attention-normed rows) of layer l.
// row_independent: generation (every product row-independent, see gemm.cuh).
void moe_fwd(rs_model* m, int l, const float* x, int T, MoeDev& b, float* out, bool row_independent);

// dx [T, D] (device) is overwritten with dL/dx; the router's and experts' weight gradients are added into the
// model's gradient buffer. aux_dp [E]: the load-balancing loss's dL/dp (empty = none).
void moe_bwd(rs_model* m, int l, const float* x, int T, MoeDev& b, const float* dout, const std::vector<float>& aux_dp, MoeScratchDev& s,
             float* dx);

}  // namespace rsc
