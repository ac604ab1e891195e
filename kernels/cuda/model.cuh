// The model object behind rs_model* on the GPU: config, parameter layout (identical to the CPU backend's),
// the four flat fp32 buffers in device memory, an optional bf16 copy of the params for the matmuls, the
// activation arena, and the host mirrors the ABI's pointer getters hand out.
//
// Host mirrors (the ABI promises host pointers to the flat buffers): the device holds the truth. A getter
// (rs_model_params() etc.) downloads the buffer when the host copy is stale and marks it "dirty" (the caller
// may write through the pointer); the next model call uploads every dirty buffer before it runs. So a caller
// must call the getter again after a model call to see fresh values; a pointer kept across calls shows the
// values of the time it was obtained (the N-API addon calls the getter for every read and write).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "common.cuh"
#include "elementwise.cuh"
#include "gemm.cuh"
#include "loss.cuh"
#include "moe.cuh"
#include "qk_norm.cuh"
#include "rmsnorm.cuh"
#include "../shared/model_layout.h"

namespace rsc {

using rs_shared::Dims;
using rs_shared::LayerOffsets;

struct Mirror {
  float* host = nullptr;  // allocated by the first getter call
  bool valid = false;     // host == device
  bool dirty = false;     // the host copy was handed out: upload it before the next device use
};

// Activations of one packed row of T tokens (device), kept for the backward; one allocation, grown on demand.
struct Acts {
  struct Layer {
    float *ln1, *rstd1, *qkv, *att, *lse, *xmid, *ln2, *rstd2, *gu, *hm;
    float *qk_raw, *qk_rstd;  // q|k before the per-head norm [T, (H+KV)*hd] and its rstd [T, H+KV]; null without qk_norm
  };
  int cap = 0;
  DevBuf<float> buf;
  std::vector<float*> X;  // residual stream: X[l] enters layer l, X[L] enters the final norm
  std::vector<Layer> layers;
  float *lnf = nullptr, *rstdf = nullptr;
  float *tmpD = nullptr, *dres = nullptr, *dln = nullptr, *dqkv = nullptr, *datt = nullptr, *dgu = nullptr, *dhm = nullptr,
        *delta = nullptr;
  DevBuf<int32_t> ints;  // tokens [cap], positions [cap]
  int32_t *tokens = nullptr, *pos = nullptr;
  DevBuf<int4> tiles;
  DevBuf<int2> prefix;  // per tile: the parent keys its queries read first (group-prefix packing)
  int n_tiles = 0;
  std::vector<MoeDev> moe;  // per layer; used by MoE layers only
  MoeScratchDev moe_scratch;
  void ensure(const Dims& d, int T);
};

// LM-head chunk buffers (train and forward) and the per-loss-row arrays.
struct HeadBufs {
  DevBuf<float> X, dX, logits, adv, slp, token_lp;
  DevBuf<int32_t> idx, tgt;
  DevBuf<uint8_t> ones;
  DevBuf<double> row_out;
  EmbeddingBwdPlan scatter;  // adds LM-head input gradients to their source rows (a parent's last row may get several)
};

// Receives each layer's rotated k and v rows ([T, KV*hd] each at row stride ld) during a forward (prefill).
using KvSink = std::function<void(int layer, const float* k, const float* v, int ld)>;

}  // namespace rsc

struct rs_model {
  rs_model_config cfg{};
  rsc::Dims d{};
  int threads = 1;
  int64_t n_params = 0;
  int64_t lora_adapters = 0;  // rs_model_set_lora's n_adapters (dropout 0 only: no correction on this backend)
  std::vector<rs_tensor_info> tensors;
  std::vector<rsc::LayerOffsets> lo;
  int64_t off_embed = 0, off_norm = 0, off_head = 0;  // off_head == off_embed when tied
  int device = 0;
  cudaStream_t stream = nullptr;
  rsc::GemmCtx gemm;
  rsc::DevBuf<float> bufs[4];  // params, grads, adam m, adam v
  rsc::Mirror mirror[4];
  // The flat slice whose AdamW moments bufs[2] / bufs[3] hold (rs_model_shard_optimizer): all of it unless a ZeRO-1
  // learner rank keeps 1/N of the optimizer state.
  int64_t opt_offset = 0, opt_count = 0;
  rsc::DevBuf<rsc::bf16> params_bf16;  // BF16 mode only
  bool bf16_stale = true;
  int64_t step = 0;
  rsc::Acts acts;
  rsc::HeadBufs head;
  rsc::RopeTable rope;
  rsc::DevBuf<float> part;          // column-sum / rmsnorm-dw scratch
  rsc::DevBuf<double> norm_part;    // grad-norm partial sums
  std::vector<double> norm_host;
  rsc::EmbeddingBwdPlan emb_plan;
  rs_shared::RowLayout row;  // host, per token of the current row: attention ranges, positions, predicting rows
  std::vector<int4> tiles_host;
  std::vector<int2> prefix_host;

  // Floats in buffer k (the moments hold the ZeRO-1 slice only).
  int64_t len(int k) const { return k < 2 ? n_params : opt_count; }
  float* P() { return bufs[0].p; }
  float* G() { return bufs[1].p; }
  // The bf16 copy of the weight at flat offset off, or null when the matmuls do not use one.
  const rsc::bf16* Wb(int64_t off) const { return gemm.mode == rsc::MathMode::BF16 ? params_bf16.p + off : nullptr; }
};

namespace rsc {

enum BufKind { kParams = 0, kGrads = 1, kAdamM = 2, kAdamV = 3 };

// Before any device work of a model call: selects the device, uploads dirty mirrors, refreshes the bf16 copy.
void model_enter(rs_model* m);
// The AdamW moments of the model's slice, allocated (zeroed) at their first use; throws Failure when out of memory.
void ensure_moments(rs_model* m);
// After device work that changed buffer k.
inline void model_touched(rs_model* m, int k) { m->mirror[k].valid = false; }

// Checks a packed row: T >= 1, ids in the vocab, segments sorted, parents valid, every position within maxPos.
inline int32_t check_batch(const rs_model* m, const int32_t* tokens, int32_t T, const int32_t* seg, int32_t S, const int32_t* parent,
                           rs_error* err) {
  if (int32_t st = rs_shared::check_batch(m->d, tokens, T, seg, S, err)) return st;
  return rs_shared::check_parents(seg, parent, S, T, m->d.maxPos, err);
}
// Sizes the arena, uploads tokens and positions, builds the attention tiles, extends the rope table (parent: NULL =
// every segment a root).
void prepare_row(rs_model* m, const int32_t* tokens, int T, const int32_t* seg, int S, const int32_t* parent = nullptr);
// Embedding -> layers -> final norm; leaves every activation in m->acts (lnf is the LM head input).
void forward_layers(rs_model* m, int T, bool row_independent, const KvSink* sink);
// The MLP of layer l (dense SwiGLU or MoE block) on x [T, D] into out [T, D]; gu/hm: the dense layer's activations.
void mlp_fwd(rs_model* m, int l, const float* x, int T, float* gu, float* hm, MoeDev& moe, float* out, bool row_independent);
// Rows per LM-head chunk: the [R, V] logits stay around 1 GiB at most.
int head_chunk_rows(const Dims& d);
// Qwen3 q_norm / k_norm on q|k|v rows [T, QKV] in place (no-op without qk_norm); raw/rstd may be null (inference).
void qk_norm_fwd(rs_model* m, int l, float* qkv, int T, float* raw, float* rstd);
// The gradient of q|k through the norm, in place on dqkv; adds the q_norm / k_norm weight gradients.
void qk_norm_bwd(rs_model* m, int l, float* dqkv, int T);

}  // namespace rsc
