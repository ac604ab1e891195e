// Validation of a generate request, shared by both backends so they accept and reject exactly the same
// requests with the same messages.
#pragma once
#include <cmath>
#include <cstdint>

#include "model_layout.h"

namespace rs_shared {

inline int32_t check_generate_request(const Dims& d, const int32_t* flat, const int64_t* off, int32_t n, const rs_generate_config* c,
                       const rs_generate_output* o, rs_error* err) {
  const int V = d.V;
  if (n < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: need at least one prompt");
  if (!flat || !off || !c || !o) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: null argument");
  if (off[0] != 0) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: prompt offsets must start at 0");
  for (int32_t i = 0; i < n; i++) {
    const int64_t len = off[i + 1] - off[i];
    if (len < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: prompt %d is empty", i);
    if (len > d.maxPos)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: prompt %d has %lld tokens, past maxPositionEmbeddings %d", i, (long long)len, d.maxPos);
    for (int64_t j = off[i]; j < off[i + 1]; j++)
      if (flat[j] < 0 || flat[j] >= V)
        return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: prompt %d: token id %d at index %lld is outside the vocab [0, %d)", i, flat[j],
                    (long long)(j - off[i]), V);
  }
  if (c->max_new_tokens < 0 || c->max_new_tokens > (1 << 24))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: maxNewTokens must be in [0, 2^24] (got %d)", c->max_new_tokens);
  if (!(c->temperature >= 0) || !std::isfinite(c->temperature))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: temperature must be a finite number >= 0 (got %g)", c->temperature);
  if (!(c->top_p > 0 && c->top_p <= 1)) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: topP must be in (0, 1] (got %g)", c->top_p);
  if (c->top_k < 0) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: topK must be >= 0 (got %d)", c->top_k);
  if (c->vocab_limit < 0 || c->vocab_limit > V)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: vocabLimit must be in [0, %d] (got %d)", V, c->vocab_limit);
  if (c->n_eos < 0 || (c->n_eos > 0 && !c->eos_ids)) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: bad eos ids");
  for (int32_t i = 0; i < c->n_eos; i++)
    if (c->eos_ids[i] < 0 || c->eos_ids[i] >= V)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: eos token id %d is outside the vocab [0, %d)", c->eos_ids[i], V);
  if (c->n_stop < 0 || (c->n_stop > 0 && (!c->stop_flat || !c->stop_offsets)))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: bad stop sequences");
  for (int32_t j = 0; j < c->n_stop; j++) {
    if (c->stop_offsets[0] != 0 || c->stop_offsets[j + 1] <= c->stop_offsets[j])
      return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: stop sequence %d is empty or its offsets are not increasing", j);
    for (int32_t k = c->stop_offsets[j]; k < c->stop_offsets[j + 1]; k++)
      if (c->stop_flat[k] < 0 || c->stop_flat[k] >= V)
        return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: stop sequence %d has token id %d outside the vocab [0, %d)", j, c->stop_flat[k], V);
  }
  if ((c->max_new_tokens > 0 && !o->tokens) || !o->lengths || !o->stop_reasons) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: null output buffer");
  if (c->return_logits && !o->step_logits) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: return_logits needs step_logits");
  return RS_OK;
}

}  // namespace rs_shared
