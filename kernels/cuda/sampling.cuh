// Token sampling for generation with the CPU backend's counter-based RNG (same hash, same (key, step) ->
// uniform), so a sequence's draws depend only on its own key and step, and a CUDA run can be compared with a
// CPU run. Greedy and plain temperature sampling run on the GPU (one block per row: max/argmax, log-sum-exp,
// the tempered mass, then a block-wide scan in id order to find the first token whose cumulative mass
// exceeds u * Z, as the CPU does). top-k / top-p rank the whole vocabulary; they run on the host with the CPU
// backend's algorithm on a copy of the logits (slower; a GPU version is future work).
#pragma once
#include <vector>

#include "common.cuh"
#include "../shared/sample_token.h"

namespace rsc {

using rs_shared::mix64;
using rs_shared::SampleParams;
using rs_shared::uniform01;

// Whether these parameters need the host path (top-k below V or top-p below 1 with a temperature).
bool sample_needs_host(const SampleParams& sp, int V);

// GPU path: n rows of logits [n, V] (device), u [n] (device) -> tok/slp/plp [n] (device).
void sample_rows_gpu(cudaStream_t s, const float* logits, int n, int V, const SampleParams& sp, const double* u, int32_t* tok, float* slp,
                     float* plp);

// Host path for one row: kernels/shared/sample_token.h, the very code the CPU backend runs.
int32_t sample_token_host(const float* z, int V, const SampleParams& sp, double u, float* sample_logp, float* policy_logp,
                          std::vector<int32_t>& idx, std::vector<float>& p);

}  // namespace rsc
