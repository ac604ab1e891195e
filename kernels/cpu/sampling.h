// Token sampling for generation: temperature, top-k, top-p, with a counter-based RNG so a sequence's draws
// depend only on its own key and step (not on the batch it runs in or the thread that samples it).
// The RNG and the candidate selection are kernels/shared/sample_token.h, shared with the CUDA backend.
#pragma once
#include <cstdint>
#include <vector>

#include "../shared/sample_token.h"

namespace rs {

using rs_shared::mix64;
using rs_shared::SampleParams;
using rs_shared::uniform01;

struct SampleScratch {
  std::vector<int32_t> idx;
  std::vector<float> p;
};

// Returns the token. sample_logp: log-probability under the distribution actually sampled from (after
// temperature, top-k, top-p, renormalised; 0 when greedy). policy_logp: log_softmax of the raw logits.
int32_t sample_token(const float* logits, int V, const SampleParams& sp, double u, float* sample_logp, float* policy_logp,
                     SampleScratch& s);

}  // namespace rs
