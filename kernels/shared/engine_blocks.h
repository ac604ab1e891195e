// The engine's KV block pool, host-side bookkeeping shared by both backends (the KV data itself lives in the
// backend's runner): reference counts, the content-addressed cache of full blocks, and LRU eviction.
//
// Invariants:
//   - a block is in exactly one of: the free list (ref 0, not cached), the evictable set (ref 0, cached), or in
//     use (ref > 0, cached or not). available() = free + evictable is what admission may spend.
//   - a cached block is found only by an EXACT match: same chain hash, same salt, same version (unless the engine
//     shares across versions), same tokens, and the very same parent block instance (parent id AND its
//     registration generation). The 64-bit hash only finds the candidate; a hash collision can never serve KV
//     computed from other tokens, another namespace or another prefix.
#pragma once
#include <cstdint>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rs_shared {

struct BlockKey {
  uint64_t hash;     // chain hash of (parent hash, namespace, tokens)
  int32_t parent;    // block holding the previous block_size tokens, -1 for the first block
  uint64_t parent_gen;
  uint64_t salt;     // the request's cache_salt
  int64_t version;   // policy version the block's KV was computed under
};

class BlockPool {
 public:
  BlockPool(int n_blocks, int block_size) : bs_(block_size), meta_(n_blocks), tokens_((size_t)n_blocks * block_size) {
    free_.reserve(n_blocks);
    for (int b = n_blocks - 1; b >= 0; b--) free_.push_back(b);  // pop_back hands out 0, 1, 2, ...
  }

  int size() const { return (int)meta_.size(); }
  int available() const { return (int)(free_.size() + evictable_.size()); }
  int free_count() const { return (int)free_.size(); }
  int cached_idle() const { return (int)evictable_.size(); }
  int used() const { return size() - available(); }
  int ref(int b) const { return meta_[b].ref; }
  bool cached(int b) const { return meta_[b].cached; }
  int64_t version_of(int b) const { return meta_[b].key.version; }

  // A block with ref 1, or -1 when none is available. Prefers never-cached blocks, then evicts the least
  // recently released cached one.
  int allocate() {
    int b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else if (!evictable_.empty()) {
      b = evictable_.begin()->second;
      evictable_.erase(evictable_.begin());
      uncache(b);
    } else {
      return -1;
    }
    meta_[b].ref = 1;
    return b;
  }

  void take(int b) {
    Meta& m = meta_[b];
    if (m.ref++ == 0) evictable_.erase({m.tick, b});
  }

  // Drops one reference. A block nobody holds stays cached (evictable, LRU by release order) unless its
  // version is stale (keep_version false), in which case it is forgotten at once.
  void release(int b, bool keep) {
    Meta& m = meta_[b];
    if (--m.ref > 0) return;
    if (m.cached && keep) {
      m.tick = ++clock_;
      evictable_.insert({m.tick, b});
    } else {
      if (m.cached) uncache(b);
      free_.push_back(b);
    }
  }

  // The cached block holding exactly these tokens after `parent` in this namespace, or -1.
  int lookup(const BlockKey& k, bool any_version, const int32_t* tokens) const {
    auto it = map_.find(k.hash);
    if (it == map_.end()) return -1;
    const int b = it->second;
    const Meta& m = meta_[b];
    if (m.key.parent != k.parent || m.key.parent_gen != k.parent_gen || m.key.salt != k.salt) return -1;
    if (!any_version && m.key.version != k.version) return -1;
    for (int i = 0; i < bs_; i++)
      if (tokens_[(size_t)b * bs_ + i] != tokens[i]) return -1;
    return b;
  }

  uint64_t generation(int b) const { return meta_[b].gen; }

  // Makes a full, computed, in-use block findable. A hash already taken keeps its first owner.
  void add_to_cache(int b, const BlockKey& k, const int32_t* tokens) {
    Meta& m = meta_[b];
    if (m.cached || map_.count(k.hash)) return;
    m.cached = true;
    m.key = k;
    m.gen = ++gen_clock_;
    for (int i = 0; i < bs_; i++) tokens_[(size_t)b * bs_ + i] = tokens[i];
    map_[k.hash] = b;
  }

  // Forgets every idle cached block whose version is not `keep` (after a weight update nothing will read them).
  int drop_other_versions(int64_t keep) {
    int n = 0;
    for (auto it = evictable_.begin(); it != evictable_.end();) {
      const int b = it->second;
      if (meta_[b].key.version == keep) {
        ++it;
        continue;
      }
      it = evictable_.erase(it);
      uncache(b);
      free_.push_back(b);
      n++;
    }
    return n;
  }

 private:
  struct Meta {
    int32_t ref = 0;
    bool cached = false;
    BlockKey key{};
    uint64_t gen = 0;   // bumped on every registration: a child's parent link names one instance
    uint64_t tick = 0;  // release order, for LRU
  };

  void uncache(int b) {
    Meta& m = meta_[b];
    auto it = map_.find(m.key.hash);
    if (it != map_.end() && it->second == b) map_.erase(it);
    m.cached = false;
    m.gen = ++gen_clock_;  // children registered under the old instance no longer match
  }

  int bs_;
  std::vector<Meta> meta_;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> free_;
  std::set<std::pair<uint64_t, int32_t>> evictable_;
  std::unordered_map<uint64_t, int32_t> map_;
  uint64_t clock_ = 0, gen_clock_ = 0;
};

}  // namespace rs_shared
