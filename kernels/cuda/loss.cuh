// Fused log-softmax / gather / loss / dlogits, one block per row: max, then sum of exp and of exp * z (the
// entropy) in double, then the loss and its derivative g = dLoss/dlogp on one thread (double, the CPU
// backend's formulas), then dlogits = g * (onehot - softmax) written in place if asked. No probability matrix.
#pragma once
#include <vector>

#include "common.cuh"

namespace rsc {

constexpr int kLossRowOut = 8;  // doubles per row: loss, entropy, k3, logp, ratio, used, masked, pad

using rs_shared::check_loss_spec;  // kernels/shared/train_checks.h

// Over N rows of logits [N, V] (device). targets / mask / adv / slp: device arrays of N (adv, slp may be null
// for SFT). dlogits may equal logits (in place) or be null; token_logp (device, N) may be null. row_out:
// device, N * kLossRowOut doubles.
void loss_rows(cudaStream_t s, const float* logits, int N, int V, const int32_t* targets, const uint8_t* mask, const float* adv,
               const float* slp, const rs_loss_spec& spec, float* dlogits, float* token_logp, double* row_out);
// Adds the per-row results (host copy) to stats in row order, like the CPU backend.
void loss_accumulate(const double* row_out, int N, rs_loss_stats* stats);

}  // namespace rsc
