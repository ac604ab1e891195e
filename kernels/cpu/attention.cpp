// Causal grouped-query attention over packed segments. The forward keeps only the log-sum-exp per
// (token, head); the backward recomputes the probabilities (flash-attention style), in two passes so that
// every gradient row is owned by one thread and summed in a fixed order: dq by query row, then dk/dv by key
// row. Scores are computed 8 keys (or queries) per vector from head-transposed copies of k, v, q and dout,
// each score one fma chain over the head dim, so no horizontal sums sit in the inner loops.
#include <algorithm>
#include <limits>

#include "attention_simd.h"
#include "common.h"
#include "ops.h"

namespace rs {

// Row stride of the head-transposed copies: T rounded up plus 16 floats, so the hd rows one score reads do
// not all map to the same L1 sets (a power-of-two T would make them 4K-aliased).
int attn_ldt(int T) { return ((T + 15) / 16) * 16 + 16; }

int64_t attn_scratch_floats(const AttnDims& d) { return (int64_t)attn_ldt(d.T) * (2 * d.KV * d.hd + 2 * d.H * d.hd + 2 * d.H); }

AttnScratch attn_scratch(const AttnDims& d, float* p) {
  AttnScratch w;
  w.ldt = attn_ldt(d.T);
  const int64_t nk = (int64_t)w.ldt * d.KV * d.hd, nq = (int64_t)w.ldt * d.H * d.hd, nh = (int64_t)w.ldt * d.H;
  w.kt = p;
  w.vt = w.kt + nk;
  w.qt = w.vt + nk;
  w.dot = w.qt + nq;
  w.lset = w.dot + nq;
  w.delta = w.lset + nh;
  return w;
}

float attend_row(const float* q, const float* K, int ldk, const float* V, int ldv, int n, int hd, float scale, float* scores,
                 float* out) {
  float m = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < n; j++) {
    const float s = dot(q, K + (int64_t)j * ldk, hd) * scale;
    scores[j] = s;
    m = std::max(m, s);
  }
  double sum = 0;
  for (int j = 0; j < n; j++) {
    const float e = exp1(scores[j] - m);
    scores[j] = e;
    sum += e;
  }
  std::fill(out, out + hd, 0.f);
  for (int j = 0; j < n; j++) axpy(scores[j], V + (int64_t)j * ldv, out, hd);
  const float inv = (float)(1.0 / sum);
  for (int i = 0; i < hd; i++) out[i] *= inv;
  return (float)((double)m + std::log(sum));
}

namespace {

// xt[(h*hd + d) * ldt + t] = x[t * ld + h*hd + d]: per head and dim, the values of every token side by side, so
// scores for 8 keys (or queries) are 8 lanes of one FMA chain over d.
void transpose_heads(const float* x, int T, int ld, int width, float* xt, int ldt, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int r = 0; r < width; r++) {
    float* dst = xt + (int64_t)r * ldt;
    for (int t = 0; t < T; t++) dst[t] = x[(int64_t)t * ld + r];
  }
}

// The keys query t reads: its parent's [pb, pb + n1), then its own [b, b + n2) (n2 = t - b + 1).
struct KeyRanges {
  int pb, n1, b, n2;
  int n() const { return n1 + n2; }
};

KeyRanges key_ranges(const AttnMask& mk, int t) {
  const int pb = mk.pre_begin ? mk.pre_begin[t] : 0, pe = mk.pre_end ? mk.pre_end[t] : 0;
  return {pb, pe - pb, mk.seg_begin[t], t - mk.seg_begin[t] + 1};
}

int max_keys(const AttnMask& mk, int T) {
  int n = 1;
  for (int t = 0; t < T; t++) n = std::max(n, key_ranges(mk, t).n());
  return n;
}

// s[0..n) = x . key rows of both ranges, in key order (the unpacked row's order, so the same bits).
void dots_ranges(const float* x, const float* xt, int64_t ldt, const KeyRanges& r, int hd, float* s) {
  if (r.n1) dots_transposed(x, xt + r.pb, ldt, r.n1, hd, s);
  dots_transposed(x, xt + r.b, ldt, r.n2, hd, s + r.n1);
}

// out += sum_j w[j] * row_j over both ranges, in key order.
void accumulate_ranges(const float* w, const KeyRanges& r, const float* rows, int64_t ld, int hd, float* out) {
  if (r.n1) accumulate_rows(w, r.n1, rows + (int64_t)r.pb * ld, ld, hd, out);
  accumulate_rows(w + r.n1, r.n2, rows + (int64_t)r.b * ld, ld, hd, out);
}

}  // namespace

void attention_fwd(const float* q, const float* k, const float* v, const AttnDims& d, const AttnMask& mk, float* out, float* lse,
                   float* kt, int nt) {
  const int group = d.H / d.KV, hd = d.hd, T = d.T;
  const float scale = 1.0f / std::sqrt((float)hd);
  const int max_len = max_keys(mk, T);
  const int ldt = attn_ldt(T);
  transpose_heads(k, T, d.ldk, d.KV * hd, kt, ldt, nt);
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> sc(max_len);
#pragma omp for schedule(dynamic, 8)
    for (int64_t th = 0; th < (int64_t)T * d.H; th++) {
      const int t = (int)(th / d.H), h = (int)(th % d.H), kvh = h / group;
      const KeyRanges r = key_ranges(mk, t);
      const int n = r.n();
      float* s = sc.data();
      dots_ranges(q + (int64_t)t * d.ldq + h * hd, kt + (int64_t)kvh * hd * ldt, ldt, r, hd, s);
      float m = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < n; j++) m = std::max(m, s[j] * scale);
      exp_scaled(s, n, scale, &m, false);
      double sum = 0;
      for (int j = 0; j < n; j++) sum += s[j];
      float* o = out + (int64_t)t * d.ldo + h * hd;
      std::fill(o, o + hd, 0.f);
      accumulate_ranges(s, r, v + kvh * hd, d.ldv, hd, o);
      const float inv = (float)(1.0 / sum);
      for (int i = 0; i < hd; i++) o[i] *= inv;
      lse[th] = (float)((double)m + std::log(sum));
    }
  }
}

void attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* out, const float* lse,
                   const AttnDims& d, const AttnMask& mk, float* dq, float* dk, float* dv, const AttnScratch& w, int nt) {
  const int group = d.H / d.KV, hd = d.hd, T = d.T, H = d.H;
  const float scale = 1.0f / std::sqrt((float)hd);
  int max_len = max_keys(mk, T);
  for (int j = 0; j < T; j++) max_len = std::max(max_len, mk.key_end[j] - j);
  const int ldt = w.ldt;
  transpose_heads(k, T, d.ldk, d.KV * hd, w.kt, ldt, nt);
  transpose_heads(v, T, d.ldv, d.KV * hd, w.vt, ldt, nt);
  transpose_heads(q, T, d.ldq, H * hd, w.qt, ldt, nt);
  transpose_heads(dout, T, d.ldo, H * hd, w.dot, ldt, nt);
  transpose_heads(lse, T, H, H, w.lset, ldt, nt);
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> sbuf(max_len), dpbuf(max_len);
    // Pass 1, per query row: delta = dO.O; p_j = exp(s_j - lse); dq = scale * sum_j p_j (dO.v_j - delta) k_j.
#pragma omp for schedule(dynamic, 8)
    for (int64_t th = 0; th < (int64_t)T * H; th++) {
      const int t = (int)(th / H), h = (int)(th % H), kvh = h / group;
      const KeyRanges r = key_ranges(mk, t);
      const int n = r.n();
      const float* dO = dout + (int64_t)t * d.ldo + h * hd;
      const float dl = dot(dO, out + (int64_t)t * d.ldo + h * hd, hd);
      w.delta[(int64_t)h * ldt + t] = dl;
      float* p = sbuf.data();
      float* dp = dpbuf.data();
      dots_ranges(q + (int64_t)t * d.ldq + h * hd, w.kt + (int64_t)kvh * hd * ldt, ldt, r, hd, p);
      exp_scaled(p, n, scale, lse + th, false);
      dots_ranges(dO, w.vt + (int64_t)kvh * hd * ldt, ldt, r, hd, dp);
      for (int j = 0; j < n; j++) p[j] = p[j] * (dp[j] - dl);
      float* dqr = dq + (int64_t)t * d.ldq + h * hd;
      std::fill(dqr, dqr + hd, 0.f);
      accumulate_ranges(p, r, k + kvh * hd, d.ldk, hd, dqr);
      for (int i = 0; i < hd; i++) dqr[i] *= scale;
    }
    // Pass 2, per key row and kv head: over the heads of its group, then the queries that read it (in order;
    // for a parent's key, its own segment's queries and then every child's, one contiguous range).
#pragma omp for schedule(dynamic, 8)
    for (int64_t jk = 0; jk < (int64_t)T * d.KV; jk++) {
      const int j = (int)(jk / d.KV), kvh = (int)(jk % d.KV);
      const int m = mk.key_end[j] - j;
      const float* kr = k + (int64_t)j * d.ldk + kvh * hd;
      const float* vr = v + (int64_t)j * d.ldv + kvh * hd;
      float* dkr = dk + (int64_t)j * d.ldk + kvh * hd;
      float* dvr = dv + (int64_t)j * d.ldv + kvh * hd;
      std::fill(dkr, dkr + hd, 0.f);
      std::fill(dvr, dvr + hd, 0.f);
      float* p = sbuf.data();
      float* dp = dpbuf.data();
      for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        dots_transposed(kr, w.qt + (int64_t)h * hd * ldt + j, ldt, m, hd, p);
        exp_scaled(p, m, scale, w.lset + (int64_t)h * ldt + j, true);
        dots_transposed(vr, w.dot + (int64_t)h * hd * ldt + j, ldt, m, hd, dp);
        accumulate_rows(p, m, dout + (int64_t)j * d.ldo + h * hd, d.ldo, hd, dvr);
        const float* dl = w.delta + (int64_t)h * ldt + j;
        for (int i = 0; i < m; i++) dp[i] = p[i] * (dp[i] - dl[i]);
        accumulate_rows(dp, m, q + (int64_t)j * d.ldq + h * hd, d.ldq, hd, dkr);
      }
      for (int i = 0; i < hd; i++) dkr[i] *= scale;
    }
  }
}

}  // namespace rs

using namespace rs;

static int32_t check_attn(const char* what, int32_t T, int32_t H, int32_t KV, int32_t hd, const int32_t* seg, int32_t S, rs_error* err) {
  if (T < 1 || H < 1 || KV < 1 || hd < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: sizes must be positive (T=%d H=%d KV=%d hd=%d)", what, T, H, KV, hd);
  if (H % KV) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: heads %d not divisible by kv heads %d", what, H, KV);
  return check_segments(seg, S, T, err);
}

extern "C" {

int32_t rs_attention_fwd(const float* q, const float* k, const float* v, int32_t T, int32_t H, int32_t KV, int32_t hd,
                         const int32_t* seg_starts, int32_t S, float* out, float* lse, rs_error* err) {
  if (int32_t s = check_attn("attention_fwd", T, H, KV, hd, seg_starts, S, err)) return s;
  if (!q || !k || !v || !out || !lse) return fail(err, RS_ERR_INVALID_ARGUMENT, "attention_fwd: null buffer");
  std::vector<int32_t> b(T), e(T);
  segment_bounds(seg_starts, S, T, b.data(), e.data());
  AttnDims d{T, H, KV, hd, H * hd, KV * hd, KV * hd, H * hd};
  std::vector<float> kt((size_t)attn_ldt(T) * KV * hd);
  attention_fwd(q, k, v, d, AttnMask{b.data(), e.data(), nullptr, nullptr}, out, lse, kt.data(), current_threads());
  return ok(err);
}

int32_t rs_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* out, const float* lse,
                         int32_t T, int32_t H, int32_t KV, int32_t hd, const int32_t* seg_starts, int32_t S, float* dq, float* dk,
                         float* dv, rs_error* err) {
  if (int32_t s = check_attn("attention_bwd", T, H, KV, hd, seg_starts, S, err)) return s;
  if (!dout || !q || !k || !v || !out || !lse || !dq || !dk || !dv) return fail(err, RS_ERR_INVALID_ARGUMENT, "attention_bwd: null buffer");
  std::vector<int32_t> b(T), e(T);
  segment_bounds(seg_starts, S, T, b.data(), e.data());
  AttnDims d{T, H, KV, hd, H * hd, KV * hd, KV * hd, H * hd};
  std::vector<float> buf(attn_scratch_floats(d));
  attention_bwd(dout, q, k, v, out, lse, d, AttnMask{b.data(), e.data(), nullptr, nullptr}, dq, dk, dv, attn_scratch(d, buf.data()),
                current_threads());
  return ok(err);
}

}  // extern "C"
