// Token sampling for generation: temperature, top-k, top-p, with a counter-based RNG so a sequence's draws
// depend only on its own key and step (not on the batch it runs in or the thread that samples it).
#pragma once
#include <cstdint>
#include <vector>

namespace rs {

uint64_t mix64(uint64_t a, uint64_t b);
// Uniform in [0, 1) from (key, step).
double uniform01(uint64_t key, uint64_t step);

struct SampleParams {
  float temperature;  // <= 0: greedy
  float top_p;        // (0, 1]
  int top_k;          // 0: off
};

struct SampleScratch {
  std::vector<int32_t> idx;
  std::vector<float> p;
};

// Returns the token. sample_logp: log-probability under the distribution actually sampled from (after
// temperature, top-k, top-p, renormalised; 0 when greedy). policy_logp: log_softmax of the raw logits.
int32_t sample_token(const float* logits, int V, const SampleParams& sp, double u, float* sample_logp, float* policy_logp,
                     SampleScratch& s);

}  // namespace rs
