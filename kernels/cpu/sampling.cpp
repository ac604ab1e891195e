#include "sampling.h"

#include <algorithm>

#include "common.h"
#include "ops.h"

namespace rs {

int32_t sample_token(const float* z, int V, const SampleParams& sp, double u, float* sample_logp, float* policy_logp,
                     SampleScratch& s) {
  return rs_shared::sample_token_shared(z, V, sp, u, row_lse(z, V, nullptr), sample_logp, policy_logp, s.idx, s.p);
}

}  // namespace rs
