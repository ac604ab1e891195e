// Internal forms of the layer kernels, with row strides where the model keeps tensors side by side (q|k|v and
// gate|up live in one row). The public rs_* wrappers validate and call these; the model calls them directly.
#pragma once
#include <cstdint>
#include <vector>

#include "../kernels.h"
#include "sgemm.h"

namespace rs {

// ---- linear (HF convention y = x W^T + b, W [out, in])
void linear_fwd(GemmImpl impl, const float* x, int N, int in, const float* W, int out, const float* b, float* y, int nt);
// dx = dy W (+ beta * dx)
void linear_bwd_dx(GemmImpl impl, const float* dy, int N, int out, const float* W, int in, float beta, float* dx, int nt);
// dW += dy^T x
void linear_bwd_dw(GemmImpl impl, const float* dy, const float* x, int N, int in, int out, float* dW, int nt);
// db += column sums of dy, in fixed row chunks.
void bias_bwd(const float* dy, int N, int out, float* db, int nt);

// ---- embedding
void embedding_fwd(const float* table, int D, const int32_t* ids, int T, float* out, int nt);
void embedding_bwd(const float* dout, const int32_t* ids, int T, int D, float* dtable);

// ---- RMSNorm
void rmsnorm_fwd(const float* x, const float* w, int T, int D, float eps, float* y, float* rstd, int nt);
void residual_rmsnorm_fwd(const float* x, const float* res, const float* w, int T, int D, float eps, float* r, float* y,
                          float* rstd, int nt);
// dx = dr_in (optional; may alias dx) + d(rmsnorm)/dx . dy; dw += sum_t dy * x * rstd.
void rmsnorm_bwd(const float* dy, const float* x, const float* w, const float* rstd, int T, int D, const float* dr_in,
                 float* dx, float* dw, int nt);

// ---- per-head RMSNorm (Qwen3 q_norm / k_norm), in place on n_heads head vectors of hd from column 0 of rows
// [T, ld]. raw (stride ld_raw) receives the input and rstd (stride ld_rstd) each head's 1/rms when not NULL.
void head_rmsnorm_fwd(float* x, int T, int ld, int n_heads, int hd, const float* w, float eps, float* raw, int ld_raw, float* rstd,
                      int ld_rstd, int nt);
// g: the output's gradient in, the input's gradient out (in place); dw += sum over tokens and heads.
void head_rmsnorm_bwd(float* g, int T, int ld, int n_heads, int hd, const float* w, const float* raw, int ld_raw, const float* rstd,
                      int ld_rstd, float* dw, int nt);

// ---- RoPE
// cos/sin per (position, i < hd/2), computed like HF in float32: inv_freq = 1 / theta^(2i/hd),
// angle = float(pos) * inv_freq, then cos/sin of that float angle.
struct RopeTable {
  int hd = 0;
  double theta = 0;
  int npos = 0;
  std::vector<float> cos, sin;
  void ensure(int positions, int head_dim, double rope_theta);
};
// In place on x rows [T, ld] holding n_heads head vectors of hd from column 0; inverse = backward. Rotates the first
// tab.hd dims of each head (the table's rotary width; < hd for partial RoPE), the rest pass through.
void rope_apply(float* x, int T, int ld, int n_heads, int hd, const int32_t* pos, const RopeTable& tab, bool inverse,
                int nt);

// ---- attention
struct AttnDims {
  int T, H, KV, hd;
  int ldq, ldk, ldv, ldo;  // row strides of q / k / v (and their grads) and of out / dout
};
// One query against n keys: out = softmax(q.K^T * scale) V; returns the log-sum-exp of the scaled scores.
// scores: scratch of n floats.
float attend_row(const float* q, const float* K, int ldk, const float* V, int ldv, int n, int hd, float scale,
                 float* scores, float* out);
// Backward scratch: head-transposed k, v ([KV*hd, T]), q, dout ([H*hd, T]), lse and delta ([H, T]).
struct AttnScratch {
  int ldt;  // row stride of every transposed array (attn_ldt(T))
  float *kt, *vt, *qt, *dot, *lset, *delta;
};
int attn_ldt(int T);
int64_t attn_scratch_floats(const AttnDims& d);
AttnScratch attn_scratch(const AttnDims& d, float* p);
// Which keys each query reads (shared/row_layout.h): query t reads [pre_begin[t], pre_end[t]) (its segment's parent,
// for group-prefix packing; both NULL = no parents) then [seg_begin[t], t]; key j is read by queries [j, key_end[j]).
struct AttnMask {
  const int32_t *seg_begin, *key_end, *pre_begin, *pre_end;
};
// kt: scratch of attn_ldt(T)*KV*hd floats.
void attention_fwd(const float* q, const float* k, const float* v, const AttnDims& d, const AttnMask& mask, float* out,
                   float* lse, float* kt, int nt);
// dq/dk/dv overwritten (strides ldq/ldk/ldv).
void attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* out, const float* lse,
                   const AttnDims& d, const AttnMask& mask, float* dq, float* dk, float* dv, const AttnScratch& scratch, int nt);

// ---- SwiGLU over rows of [gate | up] (row stride 2I) -> h [rows, I]
void swiglu_fwd(const float* gate, const float* up, int64_t n, float* h);
void swiglu_bwd(const float* dh, const float* gate, const float* up, int64_t n, float* dgate, float* dup);
void swiglu_fwd_rows(const float* gu, int rows, int I, float* h, int nt);
void swiglu_bwd_rows(const float* dh, const float* gu, int rows, int I, float* dgu, int nt);

// ---- loss
using rs_shared::check_loss_spec;  // kernels/shared/train_checks.h
// The fused loss over N rows of logits (see rs_loss_fwd_bwd); stats are ADDED to *stats in row order.
void loss_rows(const float* logits, int N, int V, const int32_t* targets, const uint8_t* mask, const float* adv,
               const float* sampler_logp, const rs_loss_spec& spec, float* dlogits, float* token_logp, rs_loss_stats* stats,
               int nt);

// log-sum-exp of one row of logits (vectorised, fixed order); entropy of its softmax when not NULL.
double row_lse(const float* z, int V, double* entropy);

// ---- optimizer
double grad_sumsq(const float* g, int64_t n, int nt);
void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps, float wd,
           int64_t step, float grad_scale, int nt);

}  // namespace rs
