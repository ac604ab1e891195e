// The engine's sequences and requests, shared by both backends: a request's sampling parameters copied out of
// the caller's memory, the checks every backend applies to rs_engine_config / rs_engine_request (same messages on
// both), and the per-sequence state the scheduler moves between waiting, running and finished.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "../kernels.h"
#include "errors.h"
#include "model_layout.h"
#include "sample_token.h"

namespace rs_shared {

struct EngineParams {
  int block_size, n_blocks, max_seqs, max_prefill;
  bool any_version;
};

inline int32_t read_engine_config(const rs_engine_config* c, const Dims& d, EngineParams* out, rs_error* err) {
  if (!c) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine: null config");
  const int bs = c->block_size ? c->block_size : 16;
  if (bs < 1 || bs > 1024) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine: block_size must be in [1, 1024] (got %d)", c->block_size);
  if (c->n_blocks < 1 || c->n_blocks > (1 << 24))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine: n_blocks must be in [1, 2^24] (got %d)", c->n_blocks);
  const int max_seqs = c->max_seqs ? c->max_seqs : 256;
  if (max_seqs < 1 || max_seqs > (1 << 20)) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine: max_seqs must be in [1, 2^20] (got %d)", c->max_seqs);
  const int max_prefill = c->max_prefill_tokens ? c->max_prefill_tokens : 4096;
  if (max_prefill < 1 || max_prefill > (1 << 24))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine: max_prefill_tokens must be in [1, 2^24] (got %d)", c->max_prefill_tokens);
  if (c->cache_across_versions < 0 || c->cache_across_versions > 1)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine: cache_across_versions must be 0 or 1 (got %d)", c->cache_across_versions);
  (void)d;
  *out = EngineParams{bs, c->n_blocks, max_seqs, max_prefill, c->cache_across_versions == 1};
  return RS_OK;
}

// What a request asks for, owned by the engine (the caller's arrays may go away after rs_engine_add).
struct RequestParams {
  SampleParams sp;
  int max_new_tokens, vocab_limit;
  uint64_t salt;
  std::vector<int32_t> eos;
  std::vector<std::vector<int32_t>> stops;
};

inline int32_t check_engine_request(const rs_engine_request* r, const Dims& d, const EngineParams& ep, rs_error* err) {
  if (!r) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: null request");
  if (!r->prompt || r->n_prompt < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: the prompt is empty");
  if (r->n_prompt > d.maxPos)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: the prompt has %d tokens, past maxPositionEmbeddings %d", r->n_prompt, d.maxPos);
  for (int32_t j = 0; j < r->n_prompt; j++)
    if (r->prompt[j] < 0 || r->prompt[j] >= d.V)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: token id %d at index %d is outside the vocab [0, %d)", r->prompt[j], j, d.V);
  if (r->n_samples < 1 || r->n_samples > ep.max_seqs)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: n_samples must be in [1, max_seqs = %d] (got %d)", ep.max_seqs, r->n_samples);
  if (!r->seeds) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: seeds is NULL (one per sample)");
  if (r->max_new_tokens < 0 || r->max_new_tokens > (1 << 24))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: max_new_tokens must be in [0, 2^24] (got %d)", r->max_new_tokens);
  if (!(r->temperature >= 0) || !std::isfinite(r->temperature))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: temperature must be a finite number >= 0 (got %g)", r->temperature);
  if (!(r->top_p > 0 && r->top_p <= 1)) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: top_p must be in (0, 1] (got %g)", r->top_p);
  if (r->top_k < 0) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: top_k must be >= 0 (got %d)", r->top_k);
  if (r->vocab_limit < 0 || r->vocab_limit > d.V)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: vocab_limit must be in [0, %d] (got %d)", d.V, r->vocab_limit);
  if (r->n_eos < 0 || (r->n_eos > 0 && !r->eos_ids)) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: bad eos ids");
  for (int32_t i = 0; i < r->n_eos; i++)
    if (r->eos_ids[i] < 0 || r->eos_ids[i] >= d.V)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: eos token id %d is outside the vocab [0, %d)", r->eos_ids[i], d.V);
  if (r->n_stop < 0 || (r->n_stop > 0 && (!r->stop_flat || !r->stop_offsets)))
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: bad stop sequences");
  for (int32_t j = 0; j < r->n_stop; j++) {
    if (r->stop_offsets[0] != 0 || r->stop_offsets[j + 1] <= r->stop_offsets[j])
      return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: stop sequence %d is empty or its offsets are not increasing", j);
    for (int32_t k = r->stop_offsets[j]; k < r->stop_offsets[j + 1]; k++)
      if (r->stop_flat[k] < 0 || r->stop_flat[k] >= d.V)
        return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: stop sequence %d has token id %d outside the vocab [0, %d)", j, r->stop_flat[k], d.V);
  }
  // Every sequence must be able to run alone in the pool, or admission could wait for it forever.
  const int64_t longest = std::min<int64_t>((int64_t)r->n_prompt + r->max_new_tokens, d.maxPos);
  const int64_t blocks = (longest + ep.block_size - 1) / ep.block_size;
  if (blocks > ep.n_blocks)
    return fail(err, RS_ERR_INVALID_ARGUMENT,
                "engine add: a sequence of up to %lld tokens needs %lld KV blocks of %d, the pool has %d (raise n_blocks or lower max_new_tokens)",
                (long long)longest, (long long)blocks, ep.block_size, ep.n_blocks);
  return RS_OK;
}

inline std::shared_ptr<RequestParams> copy_request(const rs_engine_request* r) {
  auto p = std::make_shared<RequestParams>();
  p->sp = SampleParams{r->temperature, r->top_p, r->top_k};
  p->max_new_tokens = r->max_new_tokens;
  p->vocab_limit = r->vocab_limit;
  p->salt = r->cache_salt;
  p->eos.assign(r->eos_ids, r->eos_ids + r->n_eos);
  for (int32_t j = 0; j < r->n_stop; j++) p->stops.emplace_back(r->stop_flat + r->stop_offsets[j], r->stop_flat + r->stop_offsets[j + 1]);
  return p;
}

enum class SeqState { Waiting, Running, Follower, Finished };

struct EngineSeq {
  int64_t id;
  uint64_t seed;  // token k is drawn with uniform01(seed, k)
  std::shared_ptr<const RequestParams> req;
  std::vector<int32_t> tokens;  // prompt, then generated
  int P = 0, n_new = 0;
  SeqState state = SeqState::Waiting;
  // KV: blocks[i] holds positions [i*bs, (i+1)*bs); positions < n_computed hold KV.
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;  // chain hash of each full block, as far as computed
  int n_computed = 0;
  int n_hashed = 0;      // full blocks whose hash is known (and offered to the cache when `cacheable`)
  bool cacheable = true; // every KV row was computed under `version`: blocks may be shared
  int64_t version = 0;   // weights version the KV was computed under
  uint64_t admitted = 0; // admission order (preemption takes the latest first)
  EngineSeq* leader = nullptr;           // a Follower waits for its leader's prefill, then shares its blocks
  std::vector<EngineSeq*> followers;
  int len() const { return (int)tokens.size(); }

  // Stop rule for the token just appended, or -1.
  int stop_reason(const std::vector<int32_t>& eos, const Dims& d) const {
    const int32_t tok = tokens.back();
    if (std::find(eos.begin(), eos.end(), tok) != eos.end()) return RS_STOP_EOS;
    for (const auto& st : req->stops) {
      const int n = (int)st.size();
      if (n <= n_new && std::equal(st.begin(), st.end(), tokens.end() - n)) return RS_STOP_SEQUENCE;
    }
    if (n_new >= req->max_new_tokens) return RS_STOP_LENGTH;
    if (len() >= d.maxPos) return RS_STOP_CONTEXT;
    return -1;
  }
};

}  // namespace rs_shared
