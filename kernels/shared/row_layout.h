// Who attends to whom in a packed row, and at which RoPE position: the per-token view of segment starts and
// segment parents that both backends compute on the host before a forward or a train call.
//
// A segment is a root (parent -1: causal from its own first token, positions from 0) or the child of an earlier
// root (group-prefix packing: a shared prompt laid out once, followed by its completions). A child's token sees
// every token of its parent, then the tokens of its own segment up to itself, and its positions continue from the
// parent's length, so it computes exactly what the unpacked row "parent + child" computes. The children of a
// parent follow it contiguously, so the queries that read a parent's key j are one range [j, end of the last
// child), which keeps the backward's per-key pass a single contiguous loop on both backends.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "errors.h"

namespace rs_shared {

// Segment parents: NULL (every segment a root) or S entries, each -1 or the index p of a root segment before s
// such that every segment between p and s is also a child of p. A child with its parent must fit max_pos.
inline int32_t check_parents(const int32_t* seg, const int32_t* parent, int32_t S, int32_t T, int32_t max_pos, rs_error* err) {
  if (!parent) return RS_OK;
  for (int32_t s = 0; s < S; s++) {
    const int32_t p = parent[s];
    if (p == -1) continue;
    if (p < 0 || p >= s)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "segment parents: segment %d names parent %d; must be -1 or an earlier segment", s, p);
    if (parent[p] != -1)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "segment parents: segment %d's parent %d is itself a child (one level only)", s, p);
    if (s > p + 1 && parent[s - 1] != p)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "segment parents: segment %d (child of %d) must follow its parent or a sibling", s, p);
    const int32_t plen = seg[p + 1] - seg[p], len = (s + 1 < S ? seg[s + 1] : T) - seg[s];
    if (plen + len > max_pos)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "segment parents: segment %d (%d tokens) after its parent (%d tokens) is past maxPositionEmbeddings %d",
                  s, len, plen, max_pos);
  }
  return RS_OK;
}

struct RowLayout {
  // Query t reads keys [pre_begin, pre_end) (its parent; empty for a root) then [seg_begin, t].
  std::vector<int32_t> seg_begin, pre_begin, pre_end;
  // Key j is read by the queries [j, key_end[j]): its segment's end, or its last child's end for a parent.
  std::vector<int32_t> key_end;
  std::vector<int32_t> pos;  // RoPE position
  // The row whose final hidden state predicts token t: t - 1, or the parent's last row for a child's first
  // token (-1 at a root's first token: nothing predicts it).
  std::vector<int32_t> src;
  int32_t max_pos = 0;  // the largest position in the row

  // seg / parent already validated (check_segments, check_parents).
  void build(const int32_t* seg, const int32_t* parent, int32_t S, int32_t T) {
    seg_begin.resize(T), pre_begin.resize(T), pre_end.resize(T), key_end.resize(T), pos.resize(T), src.resize(T);
    max_pos = 0;
    for (int32_t s = 0; s < S; s++) {
      const int32_t b = seg[s], e = s + 1 < S ? seg[s + 1] : T, p = parent ? parent[s] : -1;
      const int32_t pb = p >= 0 ? seg[p] : b, pe = p >= 0 ? seg[p + 1] : b;
      for (int32_t t = b; t < e; t++) {
        seg_begin[t] = b, pre_begin[t] = pb, pre_end[t] = pe, key_end[t] = e;
        pos[t] = (pe - pb) + t - b;
        src[t] = t > b ? t - 1 : (p >= 0 ? pe - 1 : -1);
        max_pos = std::max(max_pos, pos[t]);
      }
      // A child extends its parent's keys to its own end (children are contiguous after the parent).
      if (p >= 0)
        for (int32_t j = pb; j < pe; j++) key_end[j] = e;
    }
  }
};

}  // namespace rs_shared
