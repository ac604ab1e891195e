// Optimizer step: global grad-norm clip, AdamW per tensor (weight decay on matrices only), zero grads.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "model.cuh"

using namespace rsc;

extern "C" {

int32_t rs_model_step(rs_model* m, const rs_optim_config* o, rs_step_result* out, rs_error* err) {
  if (!m || !o || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "step: null argument");
  if (m->opt_count != m->n_params)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "step: the model keeps a ZeRO-1 slice of the AdamW moments; step it with rs_model_shard_step");
  // The whole model is the one slice: its norm is the global one.
  double norm = 0;
  if (int32_t st = guard(err, "step", [&] {
        model_enter(m);
        norm = std::sqrt(grad_sumsq(m->stream, m->G(), m->n_params, m->norm_part, m->norm_host));
      }))
    return st;
  return rs_model_shard_step(m, o, norm, out, err);
}

int32_t rs_model_shard_optimizer(rs_model* m, int64_t offset, int64_t count, rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "shard_optimizer: null model");
  if (int32_t s = rs_shared::check_shard(m->n_params, offset, count, err)) return s;
  return guard(err, "shard_optimizer", [&] {
    model_enter(m);  // host-written moments first
    cudaStream_t s = m->stream;
    const int64_t a = std::max(offset, m->opt_offset), b = std::min(offset + count, m->opt_offset + m->opt_count);
    for (int k = 2; k < 4 && m->bufs[k].p; k++) {  // not allocated yet: the slice's will be, at their first use
      // Keep what the old slice and the new one share (zeros elsewhere), then free the old moments.
      DevBuf<float> next;
      next.reserve((size_t)count, k == 2 ? "AdamW m (ZeRO-1 slice)" : "AdamW v (ZeRO-1 slice)");
      zero_async(next.p, sizeof(float) * (size_t)std::max<int64_t>(count, 1), s, "zeroing a moment slice");
      if (a < b)
        check_cuda(cudaMemcpyAsync(next.p + (a - offset), m->bufs[k].p + (a - m->opt_offset), sizeof(float) * (size_t)(b - a),
                                   cudaMemcpyDeviceToDevice, s),
                   "copying a moment slice");
      sync_stream(s, "shard_optimizer");
      std::swap(m->bufs[k].p, next.p);
      std::swap(m->bufs[k].n, next.n);
      std::free(m->mirror[k].host);  // sized for the old slice
      m->mirror[k] = Mirror{};
    }
    m->opt_offset = offset;
    m->opt_count = count;
  });
}

void rs_model_optimizer_shard(const rs_model* m, int64_t* offset, int64_t* count) {
  if (offset) *offset = m ? m->opt_offset : 0;
  if (count) *count = m ? m->opt_count : 0;
}

int32_t rs_model_shard_step(rs_model* m, const rs_optim_config* o, double norm, rs_step_result* out, rs_error* err) {
  if (!m || !o || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "shard_step: null argument");
  if (int32_t s = rs_shared::check_optim_config(o, err)) return s;
  return guard(err, "shard_step", [&] {
    model_enter(m);  // the caller's reduce-scatter wrote the grads' slice through the host copy
    ensure_moments(m);
    cudaStream_t s = m->stream;
    *out = rs_step_result{};
    out->grad_norm = norm;
    const size_t bytes = sizeof(float) * (size_t)m->n_params;
    model_touched(m, kGrads);
    if (!std::isfinite(norm)) {
      // A non-finite gradient would poison every moment: drop this step, loudly (skipped = 1).
      zero_async(m->G(), bytes, s, "zeroing grads");
      sync_stream(s, "shard_step");
      out->skipped = 1;
      out->step = m->step;
      return;
    }
    const float scale = rs_shared::clip_scale(o, norm, &out->clipped);
    for (int k = 0; k < 4; k++) model_touched(m, k);
    m->bf16_stale = true;
    const int64_t step = m->step + 1, lo = m->opt_offset, hi = m->opt_offset + m->opt_count;
    for (const rs_tensor_info& t : m->tensors) {
      const int64_t a = std::max(t.offset, lo), b = std::min(t.offset + t.size, hi);
      if (a >= b) continue;
      adamw(s, m->P() + a, m->G() + a, m->bufs[kAdamM].p + (a - lo), m->bufs[kAdamV].p + (a - lo), b - a, o->lr, o->beta1, o->beta2, o->eps,
            t.weight_decay ? o->weight_decay : 0.f, step, scale);
    }
    zero_async(m->G(), bytes, s, "zeroing grads");
    sync_stream(s, "shard_step");
    m->step = step;
    out->step = m->step;
  });
}

}  // extern "C"
