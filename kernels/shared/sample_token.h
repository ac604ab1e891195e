// Host-side token sampling shared by both backends: the counter-based RNG and the candidate selection
// (temperature, top-k, top-p), one copy so a CUDA run samples exactly what a CPU run does. Each backend
// computes the row's log-sum-exp its own way and passes it in (only policy_logp uses it).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "exp1.h"

namespace rs_shared {

inline uint64_t mix64(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Uniform in [0, 1) from (key, step).
inline double uniform01(uint64_t key, uint64_t step) { return (double)(mix64(key, step) >> 11) * (1.0 / 9007199254740992.0); }

struct SampleParams {
  float temperature;  // <= 0: greedy
  float top_p;        // (0, 1]
  int top_k;          // 0: off
};

// First window of ranked candidates top-p looks at; it grows 8x while its mass falls short. Real chat
// vocabularies (150k ids) put top_p = 0.9-0.95 of the mass in the first few hundred ids, so the usual
// cost is one O(V) pass for the normaliser and one nth_element, not a sort of the whole vocabulary.
constexpr int kTopPWindow = 256;

// Returns the token. logits z[0, V), u uniform in [0, 1), lse the log-sum-exp of z over [0, V).
// sample_logp: log-probability under the distribution actually sampled from (tempered, restricted to top-k
// then top-p, renormalised; 0 when greedy). policy_logp: z[tok] - lse.
inline int32_t sample_token_shared(const float* z, int V, const SampleParams& sp, double u, double lse, float* sample_logp,
                                   float* policy_logp, std::vector<int32_t>& idx, std::vector<float>& p) {
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
  const float inv_t = 1.0f / sp.temperature;
  idx.resize(V);
  for (int i = 0; i < V; i++) idx[i] = i;
  int n = V;
  double Z = 0;
  if (use_k) {
    std::nth_element(idx.begin(), idx.begin() + sp.top_k, idx.end(), by_logit);
    n = sp.top_k;
    std::sort(idx.begin(), idx.begin() + n, by_logit);
  }
  const float zmax = use_k ? z[idx[0]] : *std::max_element(z, z + V);
  if (use_p && !use_k) {
    // The normaliser over the whole vocabulary (id order), then the smallest ranked prefix whose mass
    // reaches top_p of it, found in a window of the best candidates that grows until it holds that prefix.
    double total = 0;
    for (int i = 0; i < V; i++) total += exp1((z[i] - zmax) * inv_t);
    const double need = sp.top_p * total;
    for (int window = std::min(V, kTopPWindow);; window = std::min(V, window * 8)) {
      if (window < V) std::nth_element(idx.begin(), idx.begin() + window, idx.end(), by_logit);
      std::sort(idx.begin(), idx.begin() + window, by_logit);
      p.resize(window);
      double cum = 0;
      int keep = 0;
      while (keep < window) {
        p[keep] = exp1((z[idx[keep]] - zmax) * inv_t);
        cum += p[keep++];
        if (cum >= need) break;
      }
      // Rounding can leave the whole vocabulary just short of `need`: then every id is kept.
      if (cum >= need || window == V) {
        n = keep;
        Z = cum;
        break;
      }
    }
  } else {
    p.resize(n);
    for (int j = 0; j < n; j++) {
      p[j] = exp1((z[idx[j]] - zmax) * inv_t);
      Z += p[j];
    }
    if (use_p) {  // top-k, then the smallest prefix (in rank order) of it whose tempered mass reaches top_p
      double cum = 0;
      int keep = 0;
      while (keep < n) {
        cum += p[keep++];
        if (cum >= sp.top_p * Z) break;
      }
      n = keep;
      Z = cum;
    }
  }
  const double target = u * Z;
  double cum = 0;
  int pick = n - 1;
  for (int j = 0; j < n; j++) {
    cum += p[j];
    if (cum > target) {
      pick = j;
      break;
    }
  }
  // Rounding could land on a zero-probability tail entry; step back to the last one with mass.
  while (pick > 0 && p[pick] == 0.f) pick--;
  const int32_t tok = idx[pick];
  *sample_logp = (float)std::log((double)p[pick] / Z);
  *policy_logp = (float)((double)z[tok] - lse);
  return tok;
}

}  // namespace rs_shared
