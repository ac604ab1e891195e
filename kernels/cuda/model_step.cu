// Optimizer step: global grad-norm clip, AdamW per tensor (weight decay on matrices only), zero grads.
#include <cmath>

#include "model.cuh"

using namespace rsc;

extern "C" {

int32_t rs_model_step(rs_model* m, const rs_optim_config* o, rs_step_result* out, rs_error* err) {
  if (!m || !o || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "step: null argument");
  if (int32_t s = rs_shared::check_optim_config(o, err)) return s;
  return guard(err, "step", [&] {
    model_enter(m);
    cudaStream_t s = m->stream;
    const size_t bytes = sizeof(float) * (size_t)m->n_params;
    const double norm = std::sqrt(grad_sumsq(s, m->G(), m->n_params, m->norm_part, m->norm_host));
    *out = rs_step_result{};
    out->grad_norm = norm;
    if (!std::isfinite(norm)) {
      // A non-finite gradient would poison every moment: drop this step, loudly (skipped = 1).
      model_touched(m, kGrads);
      zero_async(m->G(), bytes, s, "zeroing grads");
      sync_stream(s, "step");
      out->skipped = 1;
      out->step = m->step;
      return;
    }
    float scale = 1.f;
    if (o->max_grad_norm > 0 && norm > o->max_grad_norm) {
      scale = (float)(o->max_grad_norm / (norm + 1e-6));
      out->clipped = 1;
    }
    for (int k = 0; k < 4; k++) model_touched(m, k);
    m->bf16_stale = true;
    const int64_t step = m->step + 1;
    for (const rs_tensor_info& t : m->tensors)
      adamw(s, m->P() + t.offset, m->G() + t.offset, m->bufs[kAdamM].p + t.offset, m->bufs[kAdamV].p + t.offset, t.size, o->lr, o->beta1,
            o->beta2, o->eps, t.weight_decay ? o->weight_decay : 0.f, step, scale);
    zero_async(m->G(), bytes, s, "zeroing grads");
    sync_stream(s, "step");
    m->step = step;
    out->step = m->step;
  });
}

}  // extern "C"
