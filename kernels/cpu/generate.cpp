// KV-cache generation over a ragged batch: the prompts are prefilled as one packed row (segments keep them
// apart), then decode steps run the still-active sequences together; finished ones drop out. Only
// row-independent kernels run here (our packed sgemm, never BLAS: its rows do not depend on the other rows of
// the product), so a sequence's tokens do not depend on which other prompts share its batch, nor on the
// thread count.
#include <algorithm>
#include <memory>

#include "../shared/generate_check.h"
#include "../shared/generate_loop.h"
#include "model.h"
#include "sampling.h"

namespace rs {

namespace {

struct Seq {
  int index;      // prompt index (output slot)
  int P;          // prompt length
  int cap;        // KV-cache rows
  int len;        // tokens so far (prompt + generated)
  int n_new = 0;  // generated tokens
  uint64_t key;   // RNG stream
  int32_t last = 0;
  FloatBuf k, v;  // [L][cap][KV*hd] each
  bool done = false;
};

struct PrefillSink : KvSink {
  const Dims& d;
  std::vector<Seq*> seqs;
  std::vector<int> starts;
  explicit PrefillSink(const Dims& dims) : d(dims) {}
  void put(int l, const float* k, const float* v, int ld) override {
    const int kvd = d.KV * d.hd;
    for (size_t i = 0; i < seqs.size(); i++) {
      Seq& s = *seqs[i];
      float* kc = s.k.p + (size_t)l * s.cap * kvd;
      float* vc = s.v.p + (size_t)l * s.cap * kvd;
      for (int p = 0; p < s.P; p++) {
        std::memcpy(kc + (size_t)p * kvd, k + (int64_t)(starts[i] + p) * ld, sizeof(float) * kvd);
        std::memcpy(vc + (size_t)p * kvd, v + (int64_t)(starts[i] + p) * ld, sizeof(float) * kvd);
      }
    }
  }
};

class Generator {
 public:
  Generator(rs_model* m, const rs_generate_config& c, rs_generate_output& o) : m_(m), d_(m->d), c_(c), o_(o) {
    sp_ = SampleParams{c.temperature, c.top_p, c.top_k};
  }

  // Samples one token for each of the given sequences from their logits rows [n, V] and applies stop rules.
  void sample(const std::vector<Seq*>& seqs, const float* logits) {
    const int n = (int)seqs.size(), V = d_.V;
    // Ids past vocab_limit are not candidates at all (not merely unlikely): the distribution, its
    // normaliser and both logprobs cover [0, limit) only.
    const int limit = c_.vocab_limit > 0 ? c_.vocab_limit : V;
#pragma omp parallel num_threads(m_->threads)
    {
      SampleScratch scratch;
#pragma omp for schedule(dynamic, 1)
      for (int i = 0; i < n; i++) {
        Seq& s = *seqs[i];
        const float* z = logits + (int64_t)i * V;
        float slp, plp;
        const int32_t tok = sample_token(z, limit, sp_, uniform01(s.key, (uint64_t)s.n_new), &slp, &plp, scratch);
        const int64_t slot = (int64_t)s.index * c_.max_new_tokens + s.n_new;
        o_.tokens[slot] = tok;
        if (o_.logprobs) o_.logprobs[slot] = slp;
        if (o_.policy_logprobs) o_.policy_logprobs[slot] = plp;
        if (o_.step_logits) std::memcpy(o_.step_logits + slot * V, z, sizeof(float) * V);
        s.n_new++;
        s.len++;
        s.last = tok;
        int reason = -1;
        if (std::find(c_.eos_ids, c_.eos_ids + c_.n_eos, tok) != c_.eos_ids + c_.n_eos) reason = RS_STOP_EOS;
        else if (ends_with_stop(s)) reason = RS_STOP_SEQUENCE;
        else if (s.n_new >= c_.max_new_tokens) reason = RS_STOP_LENGTH;
        else if (s.len >= d_.maxPos) reason = RS_STOP_CONTEXT;
        if (reason >= 0) finish(s, reason);
      }
    }
  }

  void finish(Seq& s, int reason) {
    s.done = true;
    o_.lengths[s.index] = s.n_new;
    o_.stop_reasons[s.index] = reason;
  }

  void prefill(std::vector<Seq*>& pack, const int32_t* flat, const int64_t* offsets) {
    int T = 0;
    std::vector<int32_t> tokens, segs;
    PrefillSink sink(d_);
    for (Seq* s : pack) {
      segs.push_back(T);
      sink.seqs.push_back(s);
      sink.starts.push_back(T);
      tokens.insert(tokens.end(), flat + offsets[s->index], flat + offsets[s->index + 1]);
      T += s->P;
    }
    if (!m_->acts.ensure(d_, T)) throw std::bad_alloc();
    prepare_positions(m_, segs.data(), (int)segs.size(), T);
    forward_layers(m_, GemmImpl::Own, tokens.data(), T, &sink);
    const int n = (int)pack.size();
    std::vector<float> X((size_t)n * d_.D), logits((size_t)n * d_.V);
    for (int i = 0; i < n; i++)
      std::memcpy(X.data() + (size_t)i * d_.D, m_->acts.lnf + (int64_t)(sink.starts[i] + pack[i]->P - 1) * d_.D, sizeof(float) * d_.D);
    linear_fwd(GemmImpl::Own, X.data(), n, d_.D, m_->params.p + m_->off_head, d_.V, nullptr, logits.data(), m_->threads);
    sample(pack, logits.data());
  }

  // One decode step for every active sequence: feed its last token at position len - 1.
  void decode(std::vector<Seq*>& act) {
    const int B = (int)act.size(), D = d_.D, A = d_.H * d_.hd, KVD = d_.KV * d_.hd, QKV = d_.QKV, I = d_.I, nt = m_->threads;
    const float* P = m_->params.p;
    X_.resize((size_t)B * D);
    Xmid_.resize((size_t)B * D);
    h_.resize((size_t)B * D);
    tmp_.resize((size_t)B * D);
    rstd_.resize(B);
    qkv_.resize((size_t)B * QKV);
    att_.resize((size_t)B * A);
    gu_.resize((size_t)B * 2 * I);
    hm_.resize((size_t)B * I);
    logits_.resize((size_t)B * d_.V);
    pos_.resize(B);
    std::vector<int32_t> toks(B);
    int max_len = 1;
    for (int b = 0; b < B; b++) {
      toks[b] = act[b]->last;
      pos_[b] = act[b]->len - 1;
      max_len = std::max(max_len, act[b]->len);
    }
    embedding_fwd(P + m_->off_embed, D, toks.data(), B, X_.data(), nt);
    rmsnorm_fwd(X_.data(), P + m_->lo[0].ln1, B, D, d_.eps, h_.data(), rstd_.data(), nt);
    const int group = d_.H / d_.KV;
    const float scale = 1.0f / std::sqrt((float)d_.hd);
    for (int l = 0; l < d_.L; l++) {
      const LayerOffsets& o = m_->lo[l];
      linear_fwd(GemmImpl::Own, h_.data(), B, D, P + o.wqkv, QKV, o.bqkv >= 0 ? P + o.bqkv : nullptr, qkv_.data(), nt);
      rope_apply(qkv_.data(), B, QKV, d_.H, d_.hd, pos_.data(), m_->rope, false, nt);
      rope_apply(qkv_.data() + A, B, QKV, d_.KV, d_.hd, pos_.data(), m_->rope, false, nt);
      for (int b = 0; b < B; b++) {
        Seq& s = *act[b];
        std::memcpy(s.k.p + ((size_t)l * s.cap + pos_[b]) * KVD, qkv_.data() + (size_t)b * QKV + A, sizeof(float) * KVD);
        std::memcpy(s.v.p + ((size_t)l * s.cap + pos_[b]) * KVD, qkv_.data() + (size_t)b * QKV + A + KVD, sizeof(float) * KVD);
      }
#pragma omp parallel num_threads(nt)
      {
        std::vector<float> scores(max_len);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * d_.H; bh++) {
          const int b = bh / d_.H, h = bh % d_.H, kvh = h / group;
          Seq& s = *act[b];
          const float* kc = s.k.p + (size_t)l * s.cap * KVD + kvh * d_.hd;
          const float* vc = s.v.p + (size_t)l * s.cap * KVD + kvh * d_.hd;
          attend_row(qkv_.data() + (size_t)b * QKV + h * d_.hd, kc, KVD, vc, KVD, pos_[b] + 1, d_.hd, scale, scores.data(),
                     att_.data() + (size_t)b * A + h * d_.hd);
        }
      }
      linear_fwd(GemmImpl::Own, att_.data(), B, A, P + o.wo, D, nullptr, tmp_.data(), nt);
      residual_rmsnorm_fwd(X_.data(), tmp_.data(), P + o.ln2, B, D, d_.eps, Xmid_.data(), h_.data(), rstd_.data(), nt);
      linear_fwd(GemmImpl::Own, h_.data(), B, D, P + o.wgu, 2 * I, nullptr, gu_.data(), nt);
      swiglu_fwd_rows(gu_.data(), B, I, hm_.data(), nt);
      linear_fwd(GemmImpl::Own, hm_.data(), B, I, P + o.wdown, D, nullptr, tmp_.data(), nt);
      const bool last = l + 1 == d_.L;
      residual_rmsnorm_fwd(Xmid_.data(), tmp_.data(), P + (last ? m_->off_norm : m_->lo[l + 1].ln1), B, D, d_.eps, X_.data(), h_.data(),
                           rstd_.data(), nt);
    }
    linear_fwd(GemmImpl::Own, h_.data(), B, D, P + m_->off_head, d_.V, nullptr, logits_.data(), nt);
    sample(act, logits_.data());
  }

 private:
  bool ends_with_stop(const Seq& s) const {
    const int32_t* gen = o_.tokens + (int64_t)s.index * c_.max_new_tokens;
    for (int j = 0; j < c_.n_stop; j++) {
      const int32_t* st = c_.stop_flat + c_.stop_offsets[j];
      const int n = c_.stop_offsets[j + 1] - c_.stop_offsets[j];
      if (n <= s.n_new && std::equal(st, st + n, gen + s.n_new - n)) return true;
    }
    return false;
  }

  rs_model* m_;
  const Dims& d_;
  const rs_generate_config& c_;
  rs_generate_output& o_;
  SampleParams sp_;
  std::vector<float> X_, Xmid_, h_, tmp_, rstd_, qkv_, att_, gu_, hm_, logits_;
  std::vector<int32_t> pos_;
};

}  // namespace

}  // namespace rs

using namespace rs;

extern "C" {

int32_t rs_model_generate(rs_model* m, const int32_t* flat, const int64_t* off, int32_t n, const uint64_t* seeds,
                          const rs_generate_config* c, rs_generate_output* o, rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: null model");
  if (int32_t s = rs_shared::check_generate_request(m->d, flat, off, n, c, o, err)) return s;
  rs_generate_output out = *o;
  if (!c->return_logits) out.step_logits = nullptr;
  const Dims& d = m->d;
  try {
    Generator gen(m, *c, out);
    std::vector<std::unique_ptr<Seq>> seqs;
    std::vector<Seq*> todo;
    for (int32_t i = 0; i < n; i++) {
      auto s = std::make_unique<Seq>();
      s->index = i;
      s->P = (int)(off[i + 1] - off[i]);
      s->len = s->P;
      s->key = seeds ? seeds[i] : mix64(c->seed, (uint64_t)i);
      out.lengths[i] = 0;
      if (c->max_new_tokens == 0) gen.finish(*s, RS_STOP_LENGTH);
      else if (s->P >= d.maxPos) gen.finish(*s, RS_STOP_CONTEXT);
      else {
        s->cap = std::min(s->P + c->max_new_tokens, d.maxPos);
        const size_t kv = (size_t)d.L * s->cap * d.KV * d.hd;
        if (!s->k.resize(kv) || !s->v.resize(kv)) return fail(err, RS_ERR_OUT_OF_MEMORY, "generate: out of memory for the KV cache");
        todo.push_back(s.get());
      }
      seqs.push_back(std::move(s));
    }
    if (todo.empty()) return ok(err);
    m->rope.ensure(std::min(d.maxPos, std::max(64, [&] {
                     int mx = 0;
                     for (Seq* s : todo) mx = std::max(mx, s->cap);
                     return mx;
                   }())),
                   d.hd, d.theta);
    rs_shared::prefill_then_decode(gen, todo, flat, off);
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "generate: out of memory");
  }
  return ok(err);
}

}  // extern "C"
