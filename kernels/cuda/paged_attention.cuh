// The engine's paged KV pool on the GPU, and attention through block tables (paged_attention.cu): the CUDA twin
// of cpu/paged_attention.{h,cpp}.
#pragma once
#include "common.cuh"

namespace rsc {

// Block b, layer l: K [bs][KVD] then V [bs][KVD] (row-major: a key row is contiguous, as the decode kernel reads).
struct PagedKvDev {
  float* pool;
  int L, bs, KVD;
  __host__ __device__ int64_t block_floats() const { return (int64_t)L * 2 * bs * KVD; }
};

// Row r of the step: position pos[r] of the sequence whose block table starts at tables + table_off[seq[r]].
struct PagedRows {
  const int32_t* pos;
  const int32_t* seq;
  const int32_t* tables;
  const int32_t* table_off;
  int R;
};

void paged_kv_store(cudaStream_t s, const PagedKvDev& kv, int l, const float* k, const float* v, int ld, const PagedRows& rows);
// out[r, h] = attention of q[r, h] over positions 0..pos[r] of its sequence; GQA as the decode kernel.
void paged_attention(cudaStream_t s, const PagedKvDev& kv, int l, const float* q, int ldq, const PagedRows& rows, int H, int KV, int hd,
                     float* out, int ldo);

}  // namespace rsc
