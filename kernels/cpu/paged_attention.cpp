// Attention through block tables, for the engine: each row's K/V is stored into its sequence's block, then
// each (row, head) attends over positions 0..pos of its sequence, block by block. The arithmetic is the packed
// attention's (attention_simd.h), so a position's output, and so its KV in the next layer, is the same bits
// whether it was a prompt row prefilled with others, a prompt row of a later chunk, or a decoded row; that is what
// lets sequences share, reuse and recompute blocks without changing a single bit of what they sample.
//
// Block layout (floats), per layer: K transposed [KV*hd][bs] (so the scores of a block's keys are lanes of one fma
// chain over the head dim, as the packed kernel's transposed K), then V row-major [bs][KV*hd].
#include <algorithm>
#include <limits>

#include "attention_simd.h"
#include "paged_attention.h"

namespace rs {

void paged_kv_store(const PagedKv& kv, int l, const float* k, const float* v, int ld, int R, const int32_t* pos, const int32_t* seq,
                    const int32_t* const* tables, int nt) {
  const int bs = kv.bs, KVD = kv.KVD;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int r = 0; r < R; r++) {
    const int p = pos[r];
    float* blk = kv.layer(tables[seq[r]][p / bs], l);
    const int slot = p % bs;
    const float* kr = k + (int64_t)r * ld;
    for (int c = 0; c < KVD; c++) blk[(int64_t)c * bs + slot] = kr[c];
    std::memcpy(blk + (int64_t)bs * KVD + (int64_t)slot * KVD, v + (int64_t)r * ld, sizeof(float) * KVD);
  }
}

// out = softmax(q.K^T * scale) V over positions [0, n) of one kv head: scores block by block into `s` (key
// order), max, exp, a double sum in key order, then one fma chain per output element over the keys in order.
static void paged_attend(const float* q, const PagedKv& kv, int l, const int32_t* table, int n, int kvh, int hd, float scale, float* s,
                         float* out) {
  const int bs = kv.bs, KVD = kv.KVD;
  for (int j = 0, b = 0; j < n; j += bs, b++)
    dots_transposed(q, kv.layer(table[b], l) + (int64_t)kvh * hd * bs, bs, std::min(bs, n - j), hd, s + j);
  float m = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < n; j++) m = std::max(m, s[j] * scale);
  exp_scaled(s, n, scale, &m, false);
  double sum = 0;
  for (int j = 0; j < n; j++) sum += s[j];
  std::fill(out, out + hd, 0.f);
  for (int j = 0, b = 0; j < n; j += bs, b++)
    accumulate_rows(s + j, std::min(bs, n - j), kv.layer(table[b], l) + (int64_t)bs * KVD + kvh * hd, KVD, hd, out);
  const float inv = (float)(1.0 / sum);
  for (int i = 0; i < hd; i++) out[i] *= inv;
}

void paged_attention(const PagedKv& kv, int l, const float* q, int ldq, int R, int H, int KV, int hd, const int32_t* pos, const int32_t* seq,
                     const int32_t* const* tables, float* out, int ldo, int nt) {
  const int group = H / KV;
  const float scale = 1.0f / std::sqrt((float)hd);
  int max_len = 1;
  for (int r = 0; r < R; r++) max_len = std::max(max_len, pos[r] + 1);
#pragma omp parallel num_threads(nt)
  {
    // Rounded up to whole blocks of 32: dots_transposed writes in masked vectors, never past n.
    std::vector<float> scores((size_t)max_len + 32);
#pragma omp for schedule(dynamic, 4)
    for (int64_t rh = 0; rh < (int64_t)R * H; rh++) {
      const int r = (int)(rh / H), h = (int)(rh % H);
      paged_attend(q + (int64_t)r * ldq + h * hd, kv, l, tables[seq[r]], pos[r] + 1, h / group, hd, scale, scores.data(),
                   out + (int64_t)r * ldo + h * hd);
    }
  }
}

}  // namespace rs
