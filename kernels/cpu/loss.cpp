// Fused log-softmax / gather / loss / dlogits over the vocabulary, one row at a time, in vocab chunks:
// pass 1 keeps an online max, sum of exp and sum of exp*z (entropy) per row; pass 2 writes
// dlogits = g * (onehot - softmax) chunk by chunk. No probability matrix ever exists.
#include <algorithm>
#include <limits>

#include "common.h"
#include "ops.h"
#include "../shared/loss_token.h"

namespace rs {

namespace {
constexpr int VC = 1024;  // vocab chunk: stays in L1 between the max and the exp sweeps

struct RowOut {
  double loss = 0, entropy = 0, k3 = 0, logp = 0, ratio = 0;
  bool used = false, masked = false;
};

// Online statistics of one row: returns lse; fills the entropy of softmax(z).
double row_softmax_stats(const float* z, int V, double* entropy) {
  float m = -std::numeric_limits<float>::infinity();
  double s = 0, w = 0;
  for (int c0 = 0; c0 < V; c0 += VC) {
    const int n = std::min(VC, V - c0);
    const float* zc = z + c0;
    __m256 vm = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int i = 0;
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(zc + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vm);
    float cm = lanes[0];
    for (int l = 1; l < 8; l++) cm = std::max(cm, lanes[l]);
    for (; i < n; i++) cm = std::max(cm, zc[i]);
    if (cm > m) {
      if (s > 0) {
        const double r = std::exp((double)m - (double)cm);
        s *= r;
        w *= r;
      }
      m = cm;
    }
    const __m256 vmax = _mm256_set1_ps(m);
    __m256 vs = _mm256_setzero_ps(), vw = _mm256_setzero_ps();
    i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_loadu_ps(zc + i);
      const __m256 e = exp8(_mm256_sub_ps(x, vmax));
      vs = _mm256_add_ps(vs, e);
      vw = _mm256_fmadd_ps(e, x, vw);
    }
    float cs = hsum8(vs), cw = hsum8(vw);
    for (; i < n; i++) {
      const float e = exp1(zc[i] - m);
      cs += e;
      cw = std::fmaf(e, zc[i], cw);
    }
    s += cs;
    w += cw;
  }
  const double lse = (double)m + std::log(s);
  *entropy = lse - w / s;
  return lse;
}

// dlogits = g * (onehot(target) - exp(z - lse)), written chunk by chunk (may overwrite z in place).
void row_write_grad(const float* z, int V, int target, double lse, float g, float* dz) {
  const float lse_f = (float)lse;
  const __m256 vl = _mm256_set1_ps(lse_f), vng = _mm256_set1_ps(-g);
  int i = 0;
  for (; i + 8 <= V; i += 8) _mm256_storeu_ps(dz + i, _mm256_mul_ps(vng, exp8(_mm256_sub_ps(_mm256_loadu_ps(z + i), vl))));
  for (; i < V; i++) dz[i] = -g * exp1(z[i] - lse_f);
  dz[target] += g;
}
}  // namespace

double row_lse(const float* z, int V, double* entropy) {
  double e;
  const double l = row_softmax_stats(z, V, &e);
  if (entropy) *entropy = e;
  return l;
}


void loss_rows(const float* logits, int N, int V, const int32_t* targets, const uint8_t* mask, const float* adv,
               const float* sampler_logp, const rs_loss_spec& spec, float* dlogits, float* token_logp, rs_loss_stats* stats,
               int nt) {
  std::vector<RowOut> rows(N);
  const double inv_norm = 1.0 / spec.normalizer;
#pragma omp parallel for schedule(dynamic, 4) num_threads(nt)
  for (int r = 0; r < N; r++) {
    const float* z = logits + (int64_t)r * V;
    float* dz = dlogits ? dlogits + (int64_t)r * V : nullptr;
    RowOut& o = rows[r];
    if (!mask[r]) {
      if (dz) std::fill(dz, dz + V, 0.f);
      if (token_logp) token_logp[r] = 0.f;
      continue;
    }
    const int tgt = targets[r];
    const float zt = z[tgt];
    double ent;
    const double lse = row_softmax_stats(z, V, &ent);
    const double logp = (double)zt - lse;
    o.used = true;
    o.entropy = ent;
    o.logp = logp;
    const rs_shared::LossToken t = rs_shared::loss_token(spec, logp, sampler_logp ? (double)sampler_logp[r] : 0.0, adv ? (double)adv[r] : 0.0, inv_norm);
    o.loss = t.loss;
    o.k3 = t.k3;
    o.ratio = t.ratio;
    o.masked = t.masked;
    const double g = t.g;  // dLoss/dlogp, already divided by the normalizer
    if (token_logp) token_logp[r] = (float)logp;
    if (dz) {
      if (g != 0) row_write_grad(z, V, tgt, lse, (float)g, dz);
      else std::fill(dz, dz + V, 0.f);
    }
  }
  // Fixed row order: the same sums for any thread count.
  for (int r = 0; r < N; r++) {
    const RowOut& o = rows[r];
    if (!o.used) continue;
    stats->loss += o.loss;
    stats->loss_tokens += 1;
    stats->masked_tokens += o.masked ? 1 : 0;
    stats->entropy_sum += o.entropy;
    stats->mismatch_kl_sum += o.k3;
    stats->logp_sum += o.logp;
    stats->ratio_sum += o.ratio;
  }
}

}  // namespace rs

using namespace rs;

extern "C" {

int32_t rs_loss_fwd_bwd(const float* logits, int32_t N, int32_t V, const int32_t* targets, const uint8_t* mask, const float* advantages,
                        const float* sampler_logp, const rs_loss_spec* spec, float* dlogits, float* token_logp, rs_loss_stats* stats,
                        rs_error* err) {
  if (int32_t s = rs_shared::check_loss_call(logits, N, V, targets, mask, advantages, sampler_logp, spec, stats, err)) return s;
  *stats = rs_loss_stats{};
  loss_rows(logits, N, V, targets, mask, advantages, sampler_logp, *spec, dlogits, token_logp, stats, current_threads());
  return ok(err);
}

}  // extern "C"
