// One engine step: plan the rows (running sequences first, in admission order, then admissions while the prefill
// budget lasts), make room for their KV (copy-on-write, new blocks, preemption of the latest admitted), run one
// forward, offer newly full blocks to the cache, fork group followers, sample, and apply the stop rules.
// Included at the end of engine_core.h.
#pragma once

namespace rs_shared {

inline int32_t Engine::step(rs_engine_step_output* out, rs_error* err) {
  if (!out || !out->tokens || !out->finished) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine step: null output buffer");
  if (out->tokens_cap < p_.max_seqs || out->finished_cap < p_.max_seqs)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "engine step: tokens_cap (%d) and finished_cap (%d) must be at least max_seqs (%d)", out->tokens_cap,
                out->finished_cap, p_.max_seqs);
  out->n_tokens = out->n_finished = out->prefill_rows = out->decode_rows = 0;
  try {
    std::vector<Work> work = plan();
    if (!work.empty()) {
      run(work, out);
      st_.steps++;
    }
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "engine step: out of memory");
  } catch (const std::exception& e) {
    return fail(err, RS_ERR_INTERNAL, "engine step: %s", e.what());
  }
  // Sequences that finished at add time, as far as they fit after the step's own finishes (at most max_seqs).
  while (!pending_finish_.empty() && out->n_finished < out->finished_cap) {
    out->finished[out->n_finished++] = pending_finish_.front();
    pending_finish_.pop_front();
  }
  return ok(err);
}

// Decode rows always run; prompt rows share max_prefill per step. A running sequence that cannot get a block
// preempts the latest admitted ones (possibly itself, then it is skipped).
inline std::vector<Engine::Work> Engine::plan() {
  std::vector<Work> work;
  int budget = p_.max_prefill;
  for (size_t i = 0; i < running_.size(); i++) {
    EngineSeq* s = running_[i];
    const int rem = s->len() - s->n_computed;
    const int count = rem == 1 ? 1 : std::min(rem, budget);
    if (count == 0) continue;
    if (!grow(s, s->n_computed + count)) continue;  // s preempted itself (it was the last one)
    if (rem > 1) budget -= count;
    work.push_back(Work{s, s->n_computed, count});
  }
  while (!waiting_.empty() && budget > 0 && try_admit(waiting_.front())) {
    EngineSeq* s = waiting_.front();
    waiting_.pop_front();
    const int rem = s->len() - s->n_computed;
    const int count = rem == 1 ? 1 : std::min(rem, budget);
    if (rem > 1) budget -= count;
    work.push_back(Work{s, s->n_computed, count});
  }
  return work;
}

// Admits s (and its followers) when max_seqs allows and the pool can hold every block of its tokens beyond the
// cached prefix. Only full blocks strictly before the last token are looked up, so at least one row is computed
// (its logits are needed) and every block written is private.
inline bool Engine::try_admit(EngineSeq* s) {
  if (slots() + 1 + (int)s->followers.size() > p_.max_seqs) return false;
  const int bs = p_.block_size, L = s->len();
  const uint64_t ns = ns_hash(s->req->salt, version_);
  std::vector<int32_t> hit;
  std::vector<uint64_t> hashes;
  int revive = 0;
  uint64_t h = 0;
  for (int i = 0; i < (L - 1) / bs; i++) {
    const int32_t* t = s->tokens.data() + (size_t)i * bs;
    h = block_hash(h, ns, t);
    const int parent = hit.empty() ? -1 : hit.back();
    const BlockKey key{h, parent, parent < 0 ? 0 : pool_.generation(parent), s->req->salt, version_};
    const int b = pool_.lookup(key, p_.any_version, t);
    if (b < 0) break;
    if (pool_.ref(b) == 0) revive++;
    hit.push_back(b);
    hashes.push_back(h);
  }
  const int need = (L + bs - 1) / bs - (int)hit.size();
  if (need + revive > pool_.available()) return false;
  for (int b : hit) pool_.take(b);
  s->blocks = hit;
  for (int i = 0; i < need; i++) s->blocks.push_back(pool_.allocate());
  s->hashes = std::move(hashes);
  s->n_hashed = (int)hit.size();
  s->n_computed = (int)hit.size() * bs;
  s->cacheable = true;
  s->version = version_;
  s->admitted = ++admit_clock_;
  s->state = SeqState::Running;
  running_.push_back(s);
  st_.prefix_hit_tokens += s->n_computed;
  return true;
}

// Blocks for positions < upto; the block of the first position written is copied first when others share it.
inline bool Engine::grow(EngineSeq* s, int upto) {
  const int bs = p_.block_size, first = s->n_computed / bs;
  if (first < (int)s->blocks.size() && pool_.ref(s->blocks[first]) > 1) {
    const int b = alloc_for(s);
    if (b < 0) return false;
    runner_->copy_block(s->blocks[first], b);
    pool_.release(s->blocks[first], true);
    s->blocks[first] = b;
    st_.cow_copies++;
  }
  while ((int)s->blocks.size() * bs < upto) {
    const int b = alloc_for(s);
    if (b < 0) return false;
    s->blocks.push_back(b);
  }
  return true;
}

inline int Engine::alloc_for(EngineSeq* s) {
  for (;;) {
    const int b = pool_.allocate();
    if (b >= 0) return b;
    const bool self = running_.back() == s;
    preempt_last();
    if (self) return -1;
  }
}

// Recompute: the latest admitted sequence gives its blocks back (full ones stay cached, so its re-admission
// usually finds most of them) and waits at the front of the queue with the tokens it has.
inline void Engine::preempt_last() {
  EngineSeq* v = running_.back();
  running_.pop_back();
  release_blocks(v);
  v->state = SeqState::Waiting;
  waiting_.push_front(v);
  st_.preemptions++;
}

inline void Engine::run(std::vector<Work>& work, rs_engine_step_output* out) {
  StepRows rows;
  std::vector<EngineSeq*> sampled;
  for (size_t w = 0; w < work.size(); w++) {
    const Work& k = work[w];
    rows.tables.push_back(k.s->blocks.data());
    for (int p = k.start; p < k.start + k.count; p++) {
      rows.tokens.push_back(k.s->tokens[p]);
      rows.pos.push_back(p);
      rows.seq.push_back((int32_t)w);
    }
    if (k.start + k.count == k.s->len()) {
      rows.sample_rows.push_back((int32_t)rows.tokens.size() - 1);
      sampled.push_back(k.s);
    }
    (k.count == 1 && k.start == k.s->len() - 1 && k.s->n_new > 0 ? out->decode_rows : out->prefill_rows) += k.count;
  }
  logits_.resize(rows.sample_rows.size() * (size_t)d_.V);
  runner_->forward(rows, logits_.data());
  st_.prefill_rows += out->prefill_rows;
  st_.decode_rows += out->decode_rows;
  for (Work& k : work) {
    k.s->n_computed += k.count;
    offer_blocks(k.s);
  }
  std::vector<SampleJob> jobs;
  std::vector<EngineSeq*> who;
  for (size_t i = 0; i < sampled.size(); i++) {
    std::vector<EngineSeq*> group{sampled[i]};
    fork_followers(sampled[i], group);
    for (EngineSeq* s : group) {
      const RequestParams& r = *s->req;
      jobs.push_back(SampleJob{logits_.data() + i * (size_t)d_.V, r.vocab_limit > 0 ? r.vocab_limit : d_.V, r.sp,
                               uniform01(s->seed, (uint64_t)s->n_new), 0, 0.f, 0.f});
      who.push_back(s);
    }
  }
  runner_->sample(jobs);
  for (size_t j = 0; j < jobs.size(); j++) {
    EngineSeq* s = who[j];
    const int i = out->n_tokens++;
    out->tokens[i] = rs_engine_token{s->id, s->n_new, jobs[j].token, jobs[j].logprob, jobs[j].policy_logprob, version_};
    if (out->logits) std::copy(jobs[j].logits, jobs[j].logits + d_.V, out->logits + (size_t)i * d_.V);
    s->tokens.push_back(jobs[j].token);
    s->n_new++;
    st_.tokens_generated++;
    const int reason = s->stop_reason(s->req->eos, d_);
    if (reason >= 0) finish(s, reason, out);
  }
}

// A leader whose prefill just ended hands every block (the partial last one included) to its followers, which
// then sample from the same logits row with their own seeds.
inline void Engine::fork_followers(EngineSeq* s, std::vector<EngineSeq*>& group) {
  if (s->followers.empty()) return;
  size_t at = std::find(running_.begin(), running_.end(), s) - running_.begin();
  for (EngineSeq* f : s->followers) {
    for (int b : s->blocks) pool_.take(b);
    f->blocks = s->blocks;
    f->hashes = s->hashes;
    f->n_computed = s->n_computed;
    f->n_hashed = s->n_hashed;
    f->cacheable = s->cacheable;
    f->version = s->version;
    f->admitted = ++admit_clock_;
    f->state = SeqState::Running;
    f->leader = nullptr;
    running_.insert(running_.begin() + (long)++at, f);
    st_.shared_prompt_tokens += f->P;
    group.push_back(f);
  }
  s->followers.clear();
}

// Full blocks get their chain hash; those of a sequence whose KV is all under its version (or any, when the
// engine shares across versions) become findable, each linked to the exact parent block instance.
inline void Engine::offer_blocks(EngineSeq* s) {
  const int bs = p_.block_size, full = s->n_computed / bs;
  const uint64_t ns = ns_hash(s->req->salt, s->version);
  for (int i = s->n_hashed; i < full; i++) {
    const int32_t* t = s->tokens.data() + (size_t)i * bs;
    s->hashes.push_back(block_hash(i ? s->hashes[i - 1] : 0, ns, t));
    if (!s->cacheable && !p_.any_version) continue;
    const int parent = i ? s->blocks[i - 1] : -1;
    if (parent >= 0 && !pool_.cached(parent)) continue;
    pool_.add_to_cache(s->blocks[i], BlockKey{s->hashes[i], parent, parent < 0 ? 0 : pool_.generation(parent), s->req->salt, s->version},
                       t);
  }
  s->n_hashed = std::max(s->n_hashed, full);
}

inline void Engine::finish(EngineSeq* s, int reason, rs_engine_step_output* out) {
  out->finished[out->n_finished++] = rs_engine_finish{s->id, reason, s->n_new};
  drop_running(s);
  release_blocks(s);
  s->state = SeqState::Finished;
  seqs_.erase(s->id);
}

}  // namespace rs_shared
