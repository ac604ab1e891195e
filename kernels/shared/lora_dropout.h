// LoRA dropout's mask, one copy for both backends: keep or drop input element j of token t for adapted module k
// under a micro-batch's seed, from a counter-based hash (no state, so any thread order and either backend draw the
// same mask, and a replayed step draws it again).
#pragma once
#include <cstdint>

#include "sample_token.h"

namespace rs_shared {

// The key of module k's masks at token t; element j's draw is mix64(row key, j).
inline uint64_t lora_row_key(uint64_t seed, int k, int t) { return mix64(mix64(seed, (uint64_t)k), (uint64_t)t); }

// The factor drop(x) / x of element j: 1 / (1 - p) when kept, 0 when dropped (nn.Dropout's inverted scaling).
inline float lora_keep(uint64_t row_key, int j, float p) {
  const double u = (double)(mix64(row_key, (uint64_t)j) >> 11) * (1.0 / 9007199254740992.0);
  return u < (double)p ? 0.f : 1.f / (1.f - p);
}

}  // namespace rs_shared
