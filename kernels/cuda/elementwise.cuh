// Row-wise and element-wise kernels: embedding, SwiGLU, RoPE, row gather/scatter.
#pragma once
#include <vector>

#include "common.cuh"

namespace rsc {

// ---- embedding
void embedding_fwd(cudaStream_t s, const float* table, int D, const int32_t* ids_dev, int T, float* out);
// Deterministic scatter-add: the host groups token indices by id (ascending token order inside a group), one
// block column per distinct id adds its rows in that order, so a repeated id accumulates like the CPU loop.
struct EmbeddingBwdPlan {
  std::vector<int32_t> uniq, starts, order;  // distinct ids, CSR offsets into order, token indices
  DevBuf<int32_t> dev;                       // the three arrays on the device, concatenated
  void build(const int32_t* ids_host, int T, cudaStream_t s);
};
void embedding_bwd(cudaStream_t s, const float* dout, int D, const EmbeddingBwdPlan& plan, float* dtable);

// ---- SwiGLU over `rows` rows: gate/up at row stride ld_in, h (and grads) at row stride ld_out.
void swiglu_fwd(cudaStream_t s, const float* gate, const float* up, int64_t ld_in, float* h, int64_t ld_out, int rows, int64_t width);
void swiglu_bwd(cudaStream_t s, const float* dh, int64_t ld_h, const float* gate, const float* up, int64_t ld_in, float* dgate,
                float* dup, int64_t ld_g, int rows, int64_t width);

// ---- RoPE: cos/sin per (position, i < hd/2) computed on the host exactly like the CPU backend (HF float32
// arithmetic), mirrored on the device.
struct RopeTable {
  int hd = 0;
  double theta = 0;
  int npos = 0;
  std::vector<float> cos, sin;
  DevBuf<float> dcos, dsin;
  void ensure(int positions, int head_dim, double rope_theta, cudaStream_t s);
};
// In place on rows [T, ld] holding n_heads head vectors of hd from column 0; inverse = the backward.
// Rotates the first tab.hd dims of each head of hd (partial RoPE when the table is narrower than the head).
void rope_apply(cudaStream_t s, float* x, int T, int ld, int n_heads, int hd, const int32_t* pos_dev, const RopeTable& tab,
                bool inverse);

// ---- rows
// dst[r, :D] = src[idx[r] * ld_src, :D]
void gather_rows(cudaStream_t s, const float* src, int64_t ld_src, const int32_t* idx_dev, int n, int D, float* dst);
// dst[idx[r] * ld_dst, :D] = src[r, :D]
void scatter_rows(cudaStream_t s, const float* src, int n, int D, const int32_t* idx_dev, float* dst, int64_t ld_dst);

}  // namespace rsc
