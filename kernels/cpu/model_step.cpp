// Optimizer step: global grad-norm clip, AdamW per tensor (weight decay on matrices only), zero grads.
#include <algorithm>

#include "model.h"

using namespace rs;

extern "C" {

void rs_model_zero_grad(rs_model* m) {
  if (!m) return;
  std::memset(m->grads.p, 0, sizeof(float) * (size_t)m->n_params);
  std::fill(m->lora.grads.begin(), m->lora.grads.end(), 0.f);
}

int32_t rs_model_step(rs_model* m, const rs_optim_config* o, rs_step_result* out, rs_error* err) {
  if (!m || !o || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "step: null argument");
  if (int32_t s = rs_shared::check_optim_config(o, err)) return s;
  const int nt = m->threads;
  const double norm = std::sqrt(grad_sumsq(m->grads.p, m->n_params, nt));
  *out = rs_step_result{};
  out->grad_norm = norm;
  if (!std::isfinite(norm)) {
    // A non-finite gradient would poison every moment: drop this step, loudly (skipped = 1).
    rs_model_zero_grad(m);
    out->skipped = 1;
    out->step = m->step;
    return ok(err);
  }
  float scale = 1.f;
  if (o->max_grad_norm > 0 && norm > o->max_grad_norm) {
    scale = (float)(o->max_grad_norm / (norm + 1e-6));
    out->clipped = 1;
  }
  m->step++;
  for (const rs_tensor_info& t : m->tensors)
    adamw(m->params.p + t.offset, m->grads.p + t.offset, m->adam_m.p + t.offset, m->adam_v.p + t.offset, t.size, o->lr, o->beta1,
          o->beta2, o->eps, t.weight_decay ? o->weight_decay : 0.f, m->step, scale, nt);
  rs_model_zero_grad(m);
  out->step = m->step;
  return ok(err);
}

}  // extern "C"
