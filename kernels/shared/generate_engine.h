// rs_model_generate, the batch API, as a loop over the step engine (kernels.h, rs_engine_*), for both backends:
// every prompt is one request with its own seed, the pool holds every sequence at its longest (what a contiguous
// per-sequence cache would hold), and steps run until every sequence has finished. So the batch API and the step
// API give the same bits for the same seeds, and a sequence's output does not depend on the other prompts. A
// backend passes its engine runner; exceptions (out of memory, a device failure) are the caller's to map.
#pragma once
#include <algorithm>
#include <memory>
#include <vector>

#include "engine_core.h"
#include "generate_check.h"

namespace rs_shared {

constexpr int kGenerateBlock = 16;
// Prompt tokens prefilled per step: a batch of long prompts is split over steps (one prompt may exceed it alone).
constexpr int kPrefillPack = 4096;

inline rs_engine_request generate_request_of(const rs_generate_config* c, const int32_t* prompt, int32_t n, const uint64_t* seed) {
  rs_engine_request r{};
  r.prompt = prompt;
  r.n_prompt = n;
  r.n_samples = 1;
  r.seeds = seed;
  r.max_new_tokens = c->max_new_tokens;
  r.temperature = c->temperature;
  r.top_p = c->top_p;
  r.top_k = c->top_k;
  r.vocab_limit = c->vocab_limit;
  r.eos_ids = c->eos_ids;
  r.n_eos = c->n_eos;
  r.stop_flat = c->stop_flat;
  r.stop_offsets = c->stop_offsets;
  r.n_stop = c->n_stop;
  return r;
}

// Steps the engine until all n sequences (ids 1..n) have finished, writing each token into its prompt's slot.
inline int32_t drain_generate(Engine& e, int32_t n, const rs_generate_config* c, const Dims& d, rs_generate_output& o, rs_error* err) {
  std::vector<rs_engine_token> toks(n);
  std::vector<rs_engine_finish> fin(n);
  std::vector<float> logits(o.step_logits ? (size_t)n * d.V : 0);
  rs_engine_step_output so{toks.data(), n, 0, fin.data(), n, 0, o.step_logits ? logits.data() : nullptr, 0, 0};
  for (int32_t done = 0; done < n;) {
    if (int32_t s = e.step(&so, err)) return s;
    for (int32_t i = 0; i < so.n_tokens; i++) {
      const rs_engine_token& t = toks[i];
      const int64_t slot = (t.seq_id - 1) * c->max_new_tokens + t.index;
      o.tokens[slot] = t.token;
      if (o.logprobs) o.logprobs[slot] = t.logprob;
      if (o.policy_logprobs) o.policy_logprobs[slot] = t.policy_logprob;
      if (o.step_logits) std::copy(logits.data() + (size_t)i * d.V, logits.data() + (size_t)(i + 1) * d.V, o.step_logits + slot * d.V);
    }
    for (int32_t i = 0; i < so.n_finished; i++) {
      o.lengths[fin[i].seq_id - 1] = fin[i].n_tokens;
      o.stop_reasons[fin[i].seq_id - 1] = fin[i].stop_reason;
    }
    done += so.n_finished;
    if (so.n_tokens == 0 && so.n_finished == 0 && so.prefill_rows == 0)
      return fail(err, RS_ERR_INTERNAL, "generate: the engine made no progress with %d sequences unfinished", n - done);
  }
  return ok(err);
}

// make_runner(n_blocks, block_size) -> std::unique_ptr<EngineRunner>. Throws what the runner throws.
template <class MakeRunner>
int32_t generate_over_engine(const Dims& d, const int32_t* flat, const int64_t* off, int32_t n, const uint64_t* seeds,
                             const rs_generate_config* c, rs_generate_output* o, rs_error* err, MakeRunner&& make_runner) {
  if (int32_t s = check_generate_request(d, flat, off, n, c, o, err)) return s;
  rs_generate_output out = *o;
  if (!c->return_logits) out.step_logits = nullptr;
  int64_t blocks = 0;
  for (int32_t i = 0; i < n; i++)
    blocks += (std::min<int64_t>(off[i + 1] - off[i] + c->max_new_tokens, d.maxPos) + kGenerateBlock - 1) / kGenerateBlock;
  if (blocks > (1 << 24)) return fail(err, RS_ERR_OUT_OF_MEMORY, "generate: %lld KV blocks are too many for one call", (long long)blocks);
  const EngineParams p{kGenerateBlock, (int)std::max<int64_t>(blocks, 1), n, kPrefillPack, false};
  Engine e(d, p, make_runner(p.n_blocks, p.block_size));
  for (int32_t i = 0; i < n; i++) {
    out.lengths[i] = 0;
    const uint64_t seed = seeds ? seeds[i] : mix64(c->seed, (uint64_t)i);
    const rs_engine_request r = generate_request_of(c, flat + off[i], (int32_t)(off[i + 1] - off[i]), &seed);
    int64_t id;
    if (int32_t s = e.add(&r, &id, err)) return s;
  }
  return drain_generate(e, n, c, d, out, err);
}

}  // namespace rs_shared
