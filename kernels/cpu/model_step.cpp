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
  if (m->opt_count != m->n_params)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "step: the model keeps a ZeRO-1 slice of the AdamW moments; step it with rs_model_shard_step");
  // The whole model is the one slice: its norm is the global one.
  return rs_model_shard_step(m, o, std::sqrt(grad_sumsq(m->grads.p, m->n_params, m->threads)), out, err);
}

int32_t rs_model_shard_optimizer(rs_model* m, int64_t offset, int64_t count, rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "shard_optimizer: null model");
  if (int32_t s = rs_shared::check_shard(m->n_params, offset, count, err)) return s;
  FloatBuf nm, nv;
  // Not allocated yet: the slice's moments will be, at their first use.
  const bool had = m->adam_m.p != nullptr;
  if (had && (!nm.resize((size_t)count) || !nv.resize((size_t)count)))
    return fail(err, RS_ERR_OUT_OF_MEMORY, "shard_optimizer: out of memory allocating 2 x %lld moments", (long long)count);
  // Keep what the old slice and the new one share (zeros elsewhere), then free the old moments.
  const int64_t a = std::max(offset, m->opt_offset), b = std::min(offset + count, m->opt_offset + m->opt_count);
  if (had && a < b) {
    std::memcpy(nm.p + (a - offset), m->adam_m.p + (a - m->opt_offset), sizeof(float) * (size_t)(b - a));
    std::memcpy(nv.p + (a - offset), m->adam_v.p + (a - m->opt_offset), sizeof(float) * (size_t)(b - a));
  }
  m->adam_m.swap(nm);
  m->adam_v.swap(nv);
  m->opt_offset = offset;
  m->opt_count = count;
  return ok(err);
}

void rs_model_optimizer_shard(const rs_model* m, int64_t* offset, int64_t* count) {
  if (offset) *offset = m ? m->opt_offset : 0;
  if (count) *count = m ? m->opt_count : 0;
}

int32_t rs_model_shard_step(rs_model* m, const rs_optim_config* o, double norm, rs_step_result* out, rs_error* err) {
  if (!m || !o || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "shard_step: null argument");
  if (int32_t s = rs_shared::check_optim_config(o, err)) return s;
  if (int32_t s = moments(m, err)) return s;
  *out = rs_step_result{};
  out->grad_norm = norm;
  if (!std::isfinite(norm)) {
    // A non-finite gradient would poison every moment: drop this step, loudly (skipped = 1).
    rs_model_zero_grad(m);
    out->skipped = 1;
    out->step = m->step;
    return ok(err);
  }
  const float scale = rs_shared::clip_scale(o, norm, &out->clipped);
  m->step++;
  const int64_t lo = m->opt_offset, hi = m->opt_offset + m->opt_count;
  for (const rs_tensor_info& t : m->tensors) {
    const int64_t a = std::max(t.offset, lo), b = std::min(t.offset + t.size, hi);
    if (a >= b) continue;
    adamw(m->params.p + a, m->grads.p + a, m->adam_m.p + (a - lo), m->adam_v.p + (a - lo), b - a, o->lr, o->beta1, o->beta2, o->eps,
          t.weight_decay ? o->weight_decay : 0.f, m->step, scale, m->threads);
  }
  rs_model_zero_grad(m);
  out->step = m->step;
  return ok(err);
}

}  // extern "C"
