#include "sampling.h"

#include <algorithm>

#include "common.h"
#include "ops.h"

namespace rs {

uint64_t mix64(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

double uniform01(uint64_t key, uint64_t step) { return (double)(mix64(key, step) >> 11) * (1.0 / 9007199254740992.0); }

int32_t sample_token(const float* z, int V, const SampleParams& sp, double u, float* sample_logp, float* policy_logp,
                     SampleScratch& s) {
  const double lse = row_lse(z, V, nullptr);
  if (!(sp.temperature > 0)) {
    int best = 0;
    for (int i = 1; i < V; i++)
      if (z[i] > z[best]) best = i;
    *sample_logp = 0.f;
    *policy_logp = (float)((double)z[best] - lse);
    return best;
  }
  // Candidate order: by logit descending (ties: lower id first) when top-k/top-p need a ranking, else id order.
  auto by_logit = [z](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  const bool use_k = sp.top_k > 0 && sp.top_k < V, use_p = sp.top_p < 1.0f;
  s.idx.resize(V);
  for (int i = 0; i < V; i++) s.idx[i] = i;
  int n = V;
  if (use_k) {
    std::nth_element(s.idx.begin(), s.idx.begin() + sp.top_k, s.idx.end(), by_logit);
    n = sp.top_k;
    std::sort(s.idx.begin(), s.idx.begin() + n, by_logit);
  } else if (use_p) {
    std::sort(s.idx.begin(), s.idx.end(), by_logit);
  }
  float zmax = z[s.idx[0]];
  if (!use_k && !use_p)
    for (int i = 1; i < V; i++) zmax = std::max(zmax, z[i]);
  const float inv_t = 1.0f / sp.temperature;
  s.p.resize(n);
  double Z = 0;
  for (int j = 0; j < n; j++) {
    s.p[j] = exp1((z[s.idx[j]] - zmax) * inv_t);
    Z += s.p[j];
  }
  if (use_p) {  // smallest prefix (in rank order) whose tempered mass reaches top_p; at least one token
    double cum = 0;
    int keep = 0;
    while (keep < n) {
      cum += s.p[keep++];
      if (cum >= sp.top_p * Z) break;
    }
    n = keep;
    Z = cum;
  }
  const double target = u * Z;
  double cum = 0;
  int pick = n - 1;
  for (int j = 0; j < n; j++) {
    cum += s.p[j];
    if (cum > target) {
      pick = j;
      break;
    }
  }
  // Rounding could land on a zero-probability tail entry; step back to the last one with mass.
  while (pick > 0 && s.p[pick] == 0.f) pick--;
  const int32_t tok = s.idx[pick];
  *sample_logp = (float)std::log((double)s.p[pick] / Z);
  *policy_logp = (float)((double)z[tok] - lse);
  return tok;
}

}  // namespace rs
