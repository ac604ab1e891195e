// Causal grouped-query attention over packed segments, fp32 with fp32 accumulation (CUDA cores, no tensor
// cores yet). The packed row is cut into tiles of up to 16 rows that never straddle a segment, so a tile's
// keys are simply [segment begin, last row] and the result of a row does not depend on what else is packed
// with it (tile alignment is relative to the segment start). Forward: online softmax over 32-key tiles kept
// in shared memory, one warp per 4 query rows, lane j scores key j; the log-sum-exp per (row, head) feeds
// the backward, which recomputes the probabilities (flash-attention style) in two passes so every gradient
// row has one owner and a fixed summation order: dq per query tile, then dk/dv per key tile (summing the
// query heads of its group, then the queries in order).
#pragma once
#include <vector>

#include "common.cuh"
#include "../shared/row_layout.h"

namespace rsc {

constexpr int kAttnRows = 16;  // rows (queries or keys) per tile / block

struct AttnArgs {
  int T, H, KV, hd;
  const float* q;
  int ldq;  // row stride of q (and dq)
  const float* k;
  int ldk;  // of k (and dk)
  const float* v;
  int ldv;  // of v (and dv)
  int ldo;  // of out and dout
  const int4* tiles;  // {r0, r1, segment begin, end of the queries that read these keys}, on the device
  int n_tiles;
  // Per tile, the parent's keys {begin, end} its queries read before their own (group-prefix packing,
  // shared/row_layout.h); NULL = none.
  const int2* prefix;
};

// Tiles of kAttnRows rows per segment, from sorted segment starts (validated by the caller).
void attention_tiles(const int32_t* seg_starts, int S, int T, std::vector<int4>& tiles);
// The same for a row with segment parents: a parent's tiles reach to its last child's end, a child's carry its prefix.
void attention_tiles(const int32_t* seg_starts, int S, const rs_shared::RowLayout& row, std::vector<int4>& tiles, std::vector<int2>& prefix);
// Throws Failure(RS_ERR_UNSUPPORTED) when head_dim > 256 or H / KV > 32 (decode).
void attention_fwd(cudaStream_t s, const AttnArgs& a, float* out, float* lse);
// delta: scratch [T, H] (dO . O per row and head). dq/dk/dv overwritten at strides ldq/ldk/ldv.
void attention_bwd(cudaStream_t s, const AttnArgs& a, const float* out, const float* lse, const float* dout, float* dq, float* dk,
                   float* dv, float* delta);
// One query row per sequence b against its cached keys: rows [base[b], base[b] + nkeys[b]) of the layer's
// cache kc / vc (row stride KVD = KV * hd). q rows at stride ldq, out rows at stride ldo.
void attention_decode(cudaStream_t s, const float* q, int ldq, const float* kc, const float* vc, int KVD, const int32_t* base,
                      const int32_t* nkeys, int B, int H, int KV, int hd, float* out, int ldo);

}  // namespace rsc
