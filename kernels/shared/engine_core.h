// The engine behind rs_engine_* (kernels.h), host logic shared by both backends: requests, admission, paged
// block tables, prefix cache, copy-on-write, preemption, version namespacing and stop rules. The backend supplies
// an EngineRunner: the KV pool's memory, one forward over a batch of rows through the block tables, block copies,
// and sampling. See kernels.h for the contract; the scheduling itself is engine_step.h.
#pragma once
#include <deque>
#include <memory>
#include <new>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "engine_blocks.h"
#include "engine_seq.h"

namespace rs_shared {

// The rows of one step. Row r feeds tokens[r] at position pos[r] of the sequence whose block table is
// tables[seq[r]] (KV written to block tables[seq][pos / bs], slot pos % bs; attention over positions 0..pos).
struct StepRows {
  std::vector<int32_t> tokens, pos, seq;
  std::vector<const int32_t*> tables;
  std::vector<int32_t> sample_rows;  // rows whose logits are needed, in order
};

struct SampleJob {
  const float* logits;  // host memory, V floats
  int limit;            // ids [0, limit) are candidates
  SampleParams sp;
  double u;
  int32_t token;
  float logprob, policy_logprob;
};

class EngineRunner {
 public:
  virtual ~EngineRunner() = default;
  // logits: [sample_rows.size(), V] in host memory. Throws std::bad_alloc or std::runtime_error.
  virtual void forward(const StepRows& rows, float* logits) = 0;
  virtual void copy_block(int src, int dst) = 0;
  virtual void sample(std::vector<SampleJob>& jobs) = 0;
};

class Engine {
 public:
  Engine(const Dims& d, const EngineParams& p, std::unique_ptr<EngineRunner> runner)
      : d_(d), p_(p), runner_(std::move(runner)), pool_(p.n_blocks, p.block_size) {}

  int32_t add(const rs_engine_request* r, int64_t* ids, rs_error* err);
  int32_t cancel(int64_t id, rs_error* err);
  int32_t set_version(int64_t v, int32_t mode, rs_error* err);
  int32_t step(rs_engine_step_output* out, rs_error* err);
  void stats(rs_engine_stats* s) const;

 private:
  struct Work {
    EngineSeq* s;
    int start, count;
  };

  // engine_step.h
  std::vector<Work> plan();
  bool try_admit(EngineSeq* s);
  bool grow(EngineSeq* s, int upto);
  int alloc_for(EngineSeq* s);
  void preempt_last();
  void run(std::vector<Work>& work, rs_engine_step_output* out);
  void fork_followers(EngineSeq* s, std::vector<EngineSeq*>& sampled);
  void offer_blocks(EngineSeq* s);
  void finish(EngineSeq* s, int reason, rs_engine_step_output* out);

  uint64_t ns_hash(uint64_t salt, int64_t version) const {
    const uint64_t h = mix64(salt, 0x6e616d657370ull);
    return p_.any_version ? h : mix64(h, (uint64_t)version);
  }
  uint64_t block_hash(uint64_t parent, uint64_t ns, const int32_t* t) const {
    uint64_t h = mix64(parent, ns);
    for (int i = 0; i < p_.block_size; i++) h = mix64(h, (uint64_t)(uint32_t)t[i]);
    return h;
  }
  int slots() const {
    int n = 0;
    for (const EngineSeq* s : running_) n += 1 + (int)s->followers.size();
    return n;
  }
  // Idle blocks stay cached only when a later sequence could read them.
  bool worth_keeping(int b) const { return p_.any_version || pool_.version_of(b) == version_; }
  void release_blocks(EngineSeq* s) {
    for (size_t i = s->blocks.size(); i-- > 0;) pool_.release(s->blocks[i], worth_keeping(s->blocks[i]));
    s->blocks.clear();
    s->hashes.clear();
    s->n_computed = s->n_hashed = 0;
  }
  void drop_running(EngineSeq* s) {
    for (size_t i = 0; i < running_.size(); i++)
      if (running_[i] == s) {
        running_.erase(running_.begin() + (long)i);
        return;
      }
  }

  Dims d_;
  EngineParams p_;
  std::unique_ptr<EngineRunner> runner_;
  BlockPool pool_;
  std::unordered_map<int64_t, std::unique_ptr<EngineSeq>> seqs_;
  std::deque<EngineSeq*> waiting_;   // leaders and lone sequences, first come first served
  std::vector<EngineSeq*> running_;  // admission order
  std::deque<rs_engine_finish> pending_finish_;
  std::vector<float> logits_;
  int64_t version_ = 0, next_id_ = 1;
  uint64_t admit_clock_ = 0;
  rs_engine_stats st_{};
};

inline int32_t Engine::add(const rs_engine_request* r, int64_t* ids, rs_error* err) {
  if (int32_t s = check_engine_request(r, d_, p_, err)) return s;
  if (!ids) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: seq_ids_out is NULL");
  auto params = copy_request(r);
  EngineSeq* leader = nullptr;
  for (int32_t i = 0; i < r->n_samples; i++) {
    auto s = std::make_unique<EngineSeq>();
    s->id = next_id_++;
    s->seed = r->seeds[i];
    s->req = params;
    s->tokens.assign(r->prompt, r->prompt + r->n_prompt);
    s->P = r->n_prompt;
    ids[i] = s->id;
    const int immediate = r->max_new_tokens == 0 ? RS_STOP_LENGTH : r->n_prompt >= d_.maxPos ? RS_STOP_CONTEXT : -1;
    if (immediate >= 0) {
      pending_finish_.push_back(rs_engine_finish{s->id, immediate, 0});
      continue;
    }
    st_.prompt_tokens += r->n_prompt;
    if (!leader) {
      leader = s.get();
      waiting_.push_back(leader);
    } else {
      s->state = SeqState::Follower;
      s->leader = leader;
      leader->followers.push_back(s.get());
    }
    seqs_[s->id] = std::move(s);
  }
  return ok(err);
}

inline int32_t Engine::cancel(int64_t id, rs_error* err) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine cancel: no sequence %lld (unknown or finished)", (long long)id);
  EngineSeq* s = it->second.get();
  if (s->state == SeqState::Follower) {
    auto& f = s->leader->followers;
    f.erase(std::find(f.begin(), f.end(), s));
  } else if (!s->followers.empty()) {
    // Before its first token a leader differs from its followers only by id and seed: the next one takes over
    // the prefill (blocks, queue place) by swapping identities, and the cancelled identity leaves.
    EngineSeq* heir = s->followers.front();
    std::swap(s->id, heir->id);
    std::swap(s->seed, heir->seed);
    s->followers.erase(s->followers.begin());
    std::swap(it->second, seqs_[s->id]);
    it = seqs_.find(id);
  } else {
    if (s->state == SeqState::Running) drop_running(s);
    else waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
    release_blocks(s);
  }
  seqs_.erase(it);
  return ok(err);
}

inline int32_t Engine::set_version(int64_t v, int32_t mode, rs_error* err) {
  if (mode != RS_ENGINE_UPDATE_KEEP && mode != RS_ENGINE_UPDATE_RECOMPUTE)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine set_version: mode must be 0 (keep) or 1 (recompute), got %d", mode);
  version_ = v;
  if (mode == RS_ENGINE_UPDATE_KEEP) {
    for (EngineSeq* s : running_)
      if (s->version != v) s->cacheable = false;
  } else {
    while (!running_.empty()) {
      EngineSeq* s = running_.back();
      running_.pop_back();
      release_blocks(s);
      s->state = SeqState::Waiting;
      waiting_.push_front(s);
    }
  }
  if (!p_.any_version) pool_.drop_other_versions(v);
  return ok(err);
}

inline void Engine::stats(rs_engine_stats* s) const {
  *s = st_;
  s->version = version_;
  s->blocks_total = pool_.size();
  s->blocks_used = pool_.used();
  s->blocks_cached_idle = pool_.cached_idle();
  s->blocks_free = pool_.free_count();
  s->running = slots();
  int w = 0;
  for (const EngineSeq* q : waiting_) w += 1 + (int)q->followers.size();
  s->waiting = w;
}

}  // namespace rs_shared

#include "engine_step.h"
