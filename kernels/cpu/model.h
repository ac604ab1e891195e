// The model object behind rs_model*: config, parameter layout, flat buffers and the activation arena.
#pragma once
#include <cstdint>
#include <vector>

#include "common.h"
#include "moe.h"
#include "ops.h"
#include "../shared/model_layout.h"
#include "../shared/row_layout.h"

namespace rs {

using rs_shared::Dims;
using rs_shared::LayerOffsets;

// Activations of one packed row of T tokens, kept for the backward; one allocation, grown on demand.
struct Acts {
  struct Layer {
    float *ln1, *rstd1, *qkv, *att, *lse, *xmid, *ln2, *rstd2, *gu, *hm;
    float *qk_raw, *qk_rstd;  // q|k before the per-head norm [T, (H+KV)*hd] and its rstd [T, H+KV]; null without qk_norm
  };
  int cap = 0;
  FloatBuf buf;
  std::vector<float*> X;  // residual stream: X[l] enters layer l, X[L] enters the final norm
  std::vector<Layer> layers;
  float *lnf = nullptr, *rstdf = nullptr;
  // backward scratch
  float *tmpD = nullptr, *dres = nullptr, *dln = nullptr, *dqkv = nullptr, *datt = nullptr, *dgu = nullptr, *dhm = nullptr;
  float* attn = nullptr;  // attention scratch (AttnScratch layout), sized for cap tokens
  rs_shared::RowLayout row;  // who attends to whom, positions, and which row predicts each token
  AttnMask mask() const { return {row.seg_begin.data(), row.key_end.data(), row.pre_begin.data(), row.pre_end.data()}; }
  std::vector<MoeBuf> moe;  // per layer; used by MoE layers only
  MoeScratch moe_scratch;
  bool ensure(const Dims& d, int T);
};

// LoRA dropout (lora.cpp): the adapted projections of the train micro-batches, by layer and fused product.
enum class LoraSlot { Qkv, O, GateUp, Down };
struct LoraSite {
  int layer;
  LoraSlot slot;
  int col0, out, in;  // the target's output columns [col0, col0 + out) of the fused product; its input width
  int64_t a, b;       // A [rank, in] and B [out, rank] in LoraState::adapters (and grads)
  int k;              // the target's index: its masks' key
};
struct LoraState {
  int rank = 0;
  float scale = 0.f, p = 0.f;
  uint64_t seed = 0;
  std::vector<LoraSite> sites;  // empty: no correction (dropout 0 or no spec)
  std::vector<float> adapters, grads;
};

}  // namespace rs

struct rs_model {
  rs_model_config cfg;
  rs::Dims d;
  int threads;
  int64_t n_params = 0;
  std::vector<rs_tensor_info> tensors;
  std::vector<rs::LayerOffsets> lo;
  int64_t off_embed = 0, off_norm = 0, off_head = 0;  // off_head == off_embed when tied
  rs::FloatBuf params, grads, adam_m, adam_v;
  // The flat slice whose AdamW moments adam_m / adam_v hold (rs_model_shard_optimizer): all of it unless a ZeRO-1
  // learner rank keeps 1/N of the optimizer state.
  int64_t opt_offset = 0, opt_count = 0;
  int64_t step = 0;
  rs::Acts acts;
  rs::FloatBuf head_buf;  // LM-head chunk: gathered rows, logits, their gradient
  rs::RopeTable rope;
  rs::LoraState lora;
};

namespace rs {

// The AdamW moments of the model's slice, allocated (zeroed) at their first use.
inline int32_t moments(rs_model* m, rs_error* err) {
  if (m->adam_m.p && m->adam_v.p) return RS_OK;
  if (!m->adam_m.resize((size_t)m->opt_count) || !m->adam_v.resize((size_t)m->opt_count))
    return fail(err, RS_ERR_OUT_OF_MEMORY, "model: out of memory allocating 2 x %lld AdamW moments", (long long)m->opt_count);
  return RS_OK;
}

// Checks a packed row: T >= 1, ids in the vocab, segments sorted, parents valid, every position < maxPos.
inline int32_t check_batch(const rs_model* m, const int32_t* tokens, int32_t T, const int32_t* seg, int32_t S, const int32_t* parent,
                           rs_error* err) {
  if (int32_t s = rs_shared::check_batch(m->d, tokens, T, seg, S, err)) return s;
  return rs_shared::check_parents(seg, parent, S, T, m->d.maxPos, err);
}
// Fills acts.row and the rope table for this row (parent may be NULL: every segment a root).
void prepare_positions(rs_model* m, const int32_t* seg, const int32_t* parent, int32_t S, int32_t T);

// Receives each layer's rotated k and v rows ([T, KV*hd] each, row stride QKV) during a forward.
struct KvSink {
  virtual void put(int layer, const float* k, const float* v, int ld) = 0;
  virtual ~KvSink() = default;
};
// Embedding -> layers -> final norm; leaves every activation in m->acts (lnf is the LM head input). train: with the
// LoRA dropout correction (rs_model_train_micro only).
void forward_layers(rs_model* m, GemmImpl impl, const int32_t* tokens, int T, KvSink* sink, bool train = false);
// The MLP of layer l (dense SwiGLU or MoE block) on x [T, D] into out [T, D].
void mlp_fwd(rs_model* m, GemmImpl impl, int l, const float* x, int T, float* gu, float* hm, MoeBuf& moe, float* out, bool train = false);
// LoRA dropout: adds s B A (drop(x) - x) of layer l's targets in `slot` to y's columns (x [T, in] with row stride ldx,
// y with row stride ldy); the backward adds to dx and accumulates into m->lora.grads. No-ops without LoRA sites.
void lora_fwd(rs_model* m, GemmImpl impl, int l, LoraSlot slot, const float* x, int ldx, int T, float* y, int ldy);
void lora_bwd(rs_model* m, GemmImpl impl, int l, LoraSlot slot, const float* x, int ldx, int T, const float* dy, int ldy, float* dx);

// Qwen3 q_norm / k_norm on q|k|v rows [T, QKV] in place (no-op without qk_norm). raw/rstd (the layer's
// qk_raw/qk_rstd) keep what the backward needs, or are NULL at inference.
void qk_norm_fwd(const rs_model* m, int l, float* qkv, int T, float* raw, float* rstd);
// The gradient of q|k through the norm, in place on dqkv [T, QKV]; adds the q_norm / k_norm weight gradients.
void qk_norm_bwd(rs_model* m, int l, float* dqkv, int T);

}  // namespace rs
