// The per-token loss math of every named loss (DESIGN.md section 4), one copy for the CPU backend and the
// CUDA kernel (compiled as __host__ __device__ there), so both compute the same formulas in the same order.
// The backends differ only in how they get logp (the row's log-softmax at the target) and in how they
// write dlogits = g * (onehot - softmax). Adding a loss: a kind in kernels.h, a case here.
#pragma once
#include <math.h>  // exp(double) as a global name: the same libm call as std::exp on the host, the device one under nvcc
#include <stdint.h>

#include "../kernels.h"

#ifndef RS_HD
#if defined(__CUDACC__)
#define RS_HD __host__ __device__
#else
#define RS_HD
#endif
#endif

namespace rs_shared {

// One loss token's results; loss and g are already divided by the normalizer.
struct LossToken {
  double loss = 0;
  double g = 0;      // dLoss/dlogp
  double k3 = 0;     // exp(d) - d - 1, d = logp - sampler_logp (0 for losses without a sampler)
  double ratio = 0;  // exp(d) (0 likewise)
  bool masked = false;
};

// Whether the loss reads advantages and sampler logprobs (every kind but SFT).
RS_HD inline bool loss_uses_policy(int32_t kind) { return kind != RS_LOSS_SFT; }
// Whether the loss reads clip_eps / clip_eps_high (checked by check_loss_spec).
RS_HD inline bool loss_uses_clip(int32_t kind) { return kind == RS_LOSS_PPO_CLIP; }

// std::min / std::max semantics (the first argument on ties and NaN), usable in device code.
RS_HD inline double lt_min(double a, double b) { return b < a ? b : a; }
RS_HD inline double lt_max(double a, double b) { return a < b ? b : a; }

// logp: the learner's log-probability of the target; slp / A: sampler logprob and advantage (ignored by
// losses without a sampler). spec passed check_loss_spec.
RS_HD inline LossToken loss_token(const rs_loss_spec& spec, double logp, double slp, double A, double inv_norm) {
  LossToken t;
  if (!loss_uses_policy(spec.kind)) {  // SFT: cross-entropy
    t.loss = -logp * inv_norm;
    t.g = -inv_norm;
    return t;
  }
  const double d = logp - slp;
  const double ratio = exp(d);
  t.ratio = ratio;
  t.k3 = ratio - d - 1.0;  // its gradient in logp is ratio - 1
  if (spec.kind == RS_LOSS_DPPO || spec.kind == RS_LOSS_IPO) {
    // Trust region on the probability moved, not on the ratio: a rare token may change ratio a lot and
    // probability little. The d^2 term pulls every row (masked or not) back toward the sampler.
    const double diff = exp(logp) - exp(slp);
    t.masked = spec.kind == RS_LOSS_DPPO ? (A > 0 ? diff > spec.mask_high : -diff > spec.mask_low) : (diff > spec.mask_high || -diff > spec.mask_high);
    const double pg = t.masked ? 0.0 : ratio * A;
    t.loss = (-pg + spec.kl_coef * d * d) * inv_norm;
    t.g = (-pg + spec.kl_coef * 2.0 * d) * inv_norm;  // d(ratio * A)/dlogp = ratio * A; d(d^2)/dlogp = 2d
    return t;
  }
  if (ratio < spec.mask_low || ratio > spec.mask_high) {
    t.masked = true;  // no gradient, counted
    return t;
  }
  switch (spec.kind) {
    case RS_LOSS_PPO_CLIP: {
      const double clipped = lt_min(lt_max(ratio, 1.0 - spec.clip_eps), 1.0 + spec.clip_eps_high);
      const double u = ratio * A, c = clipped * A;
      // min picks the unclipped term (gradient ratio * A) unless the clipped one is smaller (gradient 0).
      t.loss = (-lt_min(u, c) + spec.kl_coef * t.k3) * inv_norm;
      t.g = ((u <= c ? -u : 0.0) + spec.kl_coef * (ratio - 1.0)) * inv_norm;
      break;
    }
    case RS_LOSS_RL:
      t.loss = (-ratio * A + spec.kl_coef * t.k3) * inv_norm;
      t.g = (-ratio * A + spec.kl_coef * (ratio - 1.0)) * inv_norm;
      break;
    default:  // unreachable: check_loss_spec rejects kinds outside [0, RS_LOSS_KIND_COUNT)
      break;
  }
  return t;
}

}  // namespace rs_shared
