// The engine's paged KV pool as the CPU kernels see it, and attention through block tables (paged_attention.cpp).
#pragma once
#include <cstdint>

namespace rs {

struct PagedKv {
  float* pool;
  int64_t block_floats;  // L * 2 * bs * KVD
  int bs, KVD;
  // Layer l of block b: K transposed [KVD][bs], then V [bs][KVD].
  float* layer(int b, int l) const { return pool + (int64_t)b * block_floats + (int64_t)l * 2 * bs * KVD; }
};

// Stores row r's k and v (row stride ld) at position pos[r] of the sequence with block table tables[seq[r]].
void paged_kv_store(const PagedKv& kv, int l, const float* k, const float* v, int ld, int R, const int32_t* pos, const int32_t* seq,
                    const int32_t* const* tables, int nt);
// out[r, h] = attention of q[r, h] over positions 0..pos[r] of its sequence (GQA: head h reads kv head h / (H/KV)).
void paged_attention(const PagedKv& kv, int l, const float* q, int ldq, int R, int H, int KV, int hd, const int32_t* pos, const int32_t* seq,
                     const int32_t* const* tables, float* out, int ldo, int nt);

}  // namespace rs
