// Validation of training inputs (packed batches, loss specs, optimizer configs), shared by both backends
// so they accept and reject exactly the same calls with the same messages.
#pragma once
#include <cmath>
#include <cstdint>

#include "errors.h"
#include "loss_token.h"
#include "model_layout.h"

namespace rs_shared {

// Segment starts of a packed row of T tokens: 0 first, strictly increasing, all below T.
inline int32_t check_segments(const int32_t* seg_starts, int32_t S, int32_t T, rs_error* err) {
  if (!seg_starts || S < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "segment starts: need at least one (got %d)", S);
  if (S > T) return fail(err, RS_ERR_INVALID_ARGUMENT, "segment starts: %d segments for %d tokens", S, T);
  if (seg_starts[0] != 0) return fail(err, RS_ERR_INVALID_ARGUMENT, "segment starts: the first must be 0 (got %d)", seg_starts[0]);
  for (int32_t s = 1; s < S; s++) {
    if (seg_starts[s] <= seg_starts[s - 1])
      return fail(err, RS_ERR_INVALID_ARGUMENT, "segment starts: must be strictly increasing (index %d: %d after %d)", s, seg_starts[s],
                  seg_starts[s - 1]);
    if (seg_starts[s] >= T)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "segment starts: index %d = %d is not below the token count %d", s, seg_starts[s], T);
  }
  return RS_OK;
}

// A packed batch for a model of dimensions d: token ids in the vocab, segments no longer than maxPos.
inline int32_t check_batch(const Dims& d, const int32_t* tokens, int32_t T, const int32_t* seg, int32_t S, rs_error* err) {
  if (T < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "batch: need at least one token (got %d)", T);
  if (!tokens) return fail(err, RS_ERR_INVALID_ARGUMENT, "batch: null tokens");
  for (int32_t t = 0; t < T; t++)
    if (tokens[t] < 0 || tokens[t] >= d.V)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "batch: token id %d at index %d is outside the vocab [0, %d)", tokens[t], t, d.V);
  if (int32_t s = check_segments(seg, S, T, err)) return s;
  for (int32_t s = 0; s < S; s++) {
    const int32_t len = (s + 1 < S ? seg[s + 1] : T) - seg[s];
    if (len > d.maxPos)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "batch: segment %d (start %d) has %d tokens, past maxPositionEmbeddings %d", s, seg[s], len,
                  d.maxPos);
  }
  return RS_OK;
}

inline int32_t check_loss_spec(const rs_loss_spec* spec, rs_error* err) {
  if (!spec) return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: null spec");
  if (spec->kind < 0 || spec->kind >= RS_LOSS_KIND_COUNT) return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: unknown kind %d", spec->kind);
  if (!(spec->normalizer > 0) || !std::isfinite(spec->normalizer))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: normalizer must be a positive finite number (got %g)", spec->normalizer);
  if (spec->kind == RS_LOSS_DPPO || spec->kind == RS_LOSS_IPO) {
    // Bounds on a probability difference: finite and >= 0 (mask_low is unused by IPO).
    if (!(spec->mask_low >= 0) || !std::isfinite(spec->mask_low) || !(spec->mask_high >= 0) || !std::isfinite(spec->mask_high))
      return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: probability-difference bounds must be finite numbers >= 0 (got %g, %g)", spec->mask_low, spec->mask_high);
  } else if (loss_uses_policy(spec->kind)) {
    if (!(spec->mask_low >= 0) || !(spec->mask_high > spec->mask_low))
      return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: need 0 <= maskLow < maskHigh (got %g, %g)", spec->mask_low, spec->mask_high);
  }
  if (loss_uses_policy(spec->kind)) {
    if (!(spec->kl_coef >= 0) || !std::isfinite(spec->kl_coef))
      return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: klCoef must be a finite number >= 0 (got %g)", spec->kl_coef);
  }
  if (loss_uses_clip(spec->kind)) {
    if (!(spec->clip_eps >= 0 && spec->clip_eps < 1))
      return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: clipEps must be in [0, 1) (got %g)", spec->clip_eps);
    if (!(spec->clip_eps_high >= 0) || !std::isfinite(spec->clip_eps_high))
      return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: clipEpsHigh must be a finite number >= 0 (got %g)", spec->clip_eps_high);
  }
  return RS_OK;
}

// The inputs of rs_loss_fwd_bwd (N rows of V logits, one target each), the same on both backends.
inline int32_t check_loss_call(const float* logits, int32_t N, int32_t V, const int32_t* targets, const uint8_t* mask, const float* advantages,
                               const float* sampler_logp, const rs_loss_spec* spec, const rs_loss_stats* stats, rs_error* err) {
  if (N < 1 || V < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: sizes must be positive (N=%d V=%d)", N, V);
  if (!logits || !targets || !mask || !stats) return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: null buffer");
  if (int32_t s = check_loss_spec(spec, err)) return s;
  const bool policy = loss_uses_policy(spec->kind);
  if (policy && (!advantages || !sampler_logp))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: advantages and sampler logprobs are required for this loss");
  for (int32_t r = 0; r < N; r++) {
    if (!mask[r]) continue;
    if (targets[r] < 0 || targets[r] >= V) return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: target %d at row %d is outside the vocab [0, %d)", targets[r], r, V);
    if (policy && (!std::isfinite(advantages[r]) || !std::isfinite(sampler_logp[r])))
      return fail(err, RS_ERR_INVALID_ARGUMENT, "loss: advantage or sampler logprob at row %d is not finite", r);
  }
  return RS_OK;
}

// The per-token inputs of rs_model_train_micro, once the batch and the loss spec passed their checks.
// rs_model_buffer_ranges' arguments: a buffer kind, every range inside [0, n_params), values when any range is
// non-empty. Returns the total number of values.
inline int32_t check_buffer_ranges(int64_t n_params, int32_t kind, int32_t write, const int64_t* off, const int64_t* size, int32_t n,
                                   const float* values, int64_t* total, rs_error* err) {
  if (kind < 0 || kind > 3) return fail(err, RS_ERR_INVALID_ARGUMENT, "buffer_ranges: kind must be 0 (params), 1 (grads), 2 or 3 (AdamW m, v) (got %d)", kind);
  if (write != 0 && write != 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "buffer_ranges: write must be 0 or 1 (got %d)", write);
  if (n < 0) return fail(err, RS_ERR_INVALID_ARGUMENT, "buffer_ranges: n must be >= 0 (got %d)", n);
  if (n > 0 && (!off || !size)) return fail(err, RS_ERR_INVALID_ARGUMENT, "buffer_ranges: null offsets or sizes");
  *total = 0;
  for (int32_t i = 0; i < n; i++) {
    if (off[i] < 0 || size[i] < 0 || off[i] > n_params || size[i] > n_params - off[i])
      return fail(err, RS_ERR_INVALID_ARGUMENT, "buffer_ranges: range %d [%lld, +%lld) is outside the buffer of %lld values", i, (long long)off[i],
                  (long long)size[i], (long long)n_params);
    *total += size[i];
  }
  if (*total > 0 && !values) return fail(err, RS_ERR_INVALID_ARGUMENT, "buffer_ranges: null values");
  return RS_OK;
}

// Kinds 2 and 3 (the AdamW moments) hold only the ZeRO-1 slice [opt_offset, opt_offset + opt_count) of the flat buffer.
inline int32_t check_moment_ranges(int32_t kind, const int64_t* off, const int64_t* size, int32_t n, int64_t opt_offset, int64_t opt_count,
                                   rs_error* err) {
  if (kind < 2) return RS_OK;
  for (int32_t i = 0; i < n; i++)
    if (size[i] > 0 && (off[i] < opt_offset || off[i] + size[i] > opt_offset + opt_count))
      return fail(err, RS_ERR_INVALID_ARGUMENT,
                  "buffer_ranges: range %d [%lld, +%lld) of the AdamW moments is outside this rank's ZeRO-1 slice [%lld, +%lld)", i,
                  (long long)off[i], (long long)size[i], (long long)opt_offset, (long long)opt_count);
  return RS_OK;
}

// The global-norm clip of a step: the factor on every gradient (1 unless max_grad_norm > 0 and the norm is above it).
inline float clip_scale(const rs_optim_config* o, double norm, int32_t* clipped) {
  if (!(o->max_grad_norm > 0 && norm > o->max_grad_norm)) return 1.f;
  *clipped = 1;
  return (float)(o->max_grad_norm / (norm + 1e-6));
}

// A ZeRO-1 slice of the flat buffer (rs_model_shard_optimizer).
inline int32_t check_shard(int64_t n_params, int64_t offset, int64_t count, rs_error* err) {
  if (offset < 0 || count < 0 || offset > n_params || count > n_params - offset)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "shard_optimizer: slice [%lld, +%lld) is outside the %lld parameters", (long long)offset,
                (long long)count, (long long)n_params);
  return RS_OK;
}

inline int32_t check_train_micro(const rs_loss_spec* spec, const uint8_t* mask, const float* adv, const float* slp, const rs_loss_stats* stats,
                                 const int32_t* seg, int32_t S, const int32_t* parent, int32_t T, rs_error* err) {
  if (!mask || !stats) return fail(err, RS_ERR_INVALID_ARGUMENT, "train: null lossMask or stats");
  const bool policy = loss_uses_policy(spec->kind);
  if (policy && (!adv || !slp)) return fail(err, RS_ERR_INVALID_ARGUMENT, "train: advantages and samplerLogprobs are required for this loss");
  // A child segment's first token is predicted by its parent's last token; a root's first token by nothing.
  for (int32_t s = 0; s < S; s++)
    if (mask[seg[s]] && !(parent && parent[s] >= 0))
      return fail(err, RS_ERR_INVALID_ARGUMENT, "train: lossMask is set at token %d, a segment start (nothing predicts it)", seg[s]);
  for (int32_t t = 0; t < T; t++) {
    if (mask[t] > 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "train: lossMask[%d] = %d; must be 0 or 1", t, mask[t]);
    if (mask[t] && policy && (!std::isfinite(adv[t]) || !std::isfinite(slp[t])))
      return fail(err, RS_ERR_INVALID_ARGUMENT, "train: advantage or samplerLogprob at token %d is not finite", t);
  }
  return RS_OK;
}

inline int32_t check_optim_config(const rs_optim_config* o, rs_error* err) {
  if (!(o->lr >= 0) || !std::isfinite(o->lr)) return fail(err, RS_ERR_INVALID_ARGUMENT, "step: lr must be a finite number >= 0 (got %g)", o->lr);
  if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "step: beta1 and beta2 must be in [0, 1) (got %g, %g)", o->beta1, o->beta2);
  if (!(o->eps > 0) || !std::isfinite(o->eps)) return fail(err, RS_ERR_INVALID_ARGUMENT, "step: eps must be a positive finite number (got %g)", o->eps);
  if (!(o->weight_decay >= 0) || !std::isfinite(o->weight_decay))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "step: weightDecay must be a finite number >= 0 (got %g)", o->weight_decay);
  if (std::isnan(o->max_grad_norm)) return fail(err, RS_ERR_INVALID_ARGUMENT, "step: maxGradNorm is NaN");
  return RS_OK;
}

}  // namespace rs_shared
