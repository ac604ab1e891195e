// KV-cache generation over a ragged batch on the GPU: the prompts are prefilled as packed rows (segments keep
// them apart; attention tiles never straddle a segment), then decode steps run the still-active sequences
// together; finished ones drop out. Only row-independent kernels run here (our own gemm, never cuBLAS, whose
// algorithm choice depends on the batch size), so a sequence's tokens do not depend on which other prompts
// share its batch. The KV cache is one fp32 pool [L][rows][KV*hd] with a contiguous slice of rows per
// sequence (prompt + max_new_tokens, capped at max_position_embeddings).
#include <algorithm>
#include <memory>
#include <thread>

#include "../shared/generate_check.h"
#include "../shared/generate_loop.h"
#include "model.cuh"
#include "sampling.cuh"

namespace rsc {

namespace {

struct Seq {
  int index;      // prompt index (output slot)
  int P;          // prompt length
  int cap = 0;    // KV-cache rows
  int len;        // tokens so far (prompt + generated)
  int n_new = 0;  // generated tokens
  int64_t base = 0;  // first KV-cache row
  uint64_t key;      // RNG stream
  int32_t last = 0;
  bool done = false;
};

__global__ void kv_store_kernel(const float* __restrict__ k, const float* __restrict__ v, int ld, int KVD, const int32_t* __restrict__ dst,
                                float* __restrict__ kc, float* __restrict__ vc) {
  const int t = blockIdx.x;
  const int64_t row = dst[t];
  for (int d = threadIdx.x; d < KVD; d += blockDim.x) {
    kc[row * KVD + d] = k[(int64_t)t * ld + d];
    vc[row * KVD + d] = v[(int64_t)t * ld + d];
  }
}

void kv_store(cudaStream_t s, const float* k, const float* v, int ld, int KVD, int T, const int32_t* dst, float* kc, float* vc) {
  if (T <= 0) return;
  kv_store_kernel<<<T, 128, 0, s>>>(k, v, ld, KVD, dst, kc, vc);
  check_launch("kv_store_kernel", s);
}

class Generator {
 public:
  Generator(rs_model* m, const rs_generate_config& c, rs_generate_output& o) : m_(m), d_(m->d), c_(c), o_(o) {
    sp_ = SampleParams{c.temperature, c.top_p, c.top_k};
    // A vocab limit samples on the host (the CPU backend's exact twin) over the first vocab_limit ids.
    limit_ = c.vocab_limit > 0 ? c.vocab_limit : d_.V;
    host_sampling_ = sample_needs_host(sp_, d_.V) || limit_ < d_.V;
  }

  void alloc_pool(int64_t rows) {
    rows_ = rows;
    const size_t n = (size_t)d_.L * rows * d_.KV * d_.hd;
    kpool_.reserve(n, "KV cache (keys)");
    vpool_.reserve(n, "KV cache (values)");
  }

  void finish(Seq& s, int reason) {
    s.done = true;
    o_.lengths[s.index] = s.n_new;
    o_.stop_reasons[s.index] = reason;
  }

  // Samples one token for each sequence from logits rows [n, V] (device) and applies the stop rules.
  void sample(const std::vector<Seq*>& seqs, const float* logits) {
    const int n = (int)seqs.size(), V = d_.V;
    cudaStream_t s = m_->stream;
    std::vector<double> u(n);
    for (int i = 0; i < n; i++) u[i] = uniform01(seqs[i]->key, (uint64_t)seqs[i]->n_new);
    tok_.resize(n);
    slp_.resize(n);
    plp_.resize(n);
    const bool need_logits = host_sampling_ || o_.step_logits;
    if (need_logits) {
      hlogits_.resize((size_t)n * V);
      to_host(hlogits_.data(), logits, sizeof(float) * hlogits_.size(), s, "generate logits");
    }
    if (host_sampling_) {
      const int nt = std::max(1, std::min(m_->threads, n));
      std::vector<char> failed(nt, 0);
      auto work = [&](int w) {
        try {  // an exception escaping a std::thread would terminate the process
          std::vector<int32_t> idx;
          std::vector<float> p;
          for (int i = w; i < n; i += nt)
            tok_[i] = sample_token_host(hlogits_.data() + (size_t)i * V, limit_, sp_, u[i], &slp_[i], &plp_[i], idx, p);
        } catch (...) {
          failed[w] = 1;
        }
      };
      std::vector<std::thread> pool;
      for (int w = 1; w < nt; w++) pool.emplace_back(work, w);
      work(0);
      for (auto& t : pool) t.join();
      for (char f : failed)
        if (f) raise(RS_ERR_OUT_OF_MEMORY, "out of host memory while sampling (top-k / top-p)");
    } else {
      sbuf_.reserve((size_t)n * 2, "sampling logprobs");  // slp [n] then plp [n]
      dev_u_.reserve((size_t)n, "sampling uniforms");
      dev_tok_.reserve((size_t)n, "sampled tokens");
      to_device(dev_u_.p, u.data(), sizeof(double) * n, s, "sampling uniforms");
      float* slp = sbuf_.p;
      float* plp = sbuf_.p + n;
      sample_rows_gpu(s, logits, n, V, sp_, dev_u_.p, dev_tok_.p, slp, plp);
      to_host(tok_.data(), dev_tok_.p, sizeof(int32_t) * n, s, "sampled tokens");
      to_host(slp_.data(), slp, sizeof(float) * n, s, "sample logprobs");
      to_host(plp_.data(), plp, sizeof(float) * n, s, "policy logprobs");
    }
    for (int i = 0; i < n; i++) {
      Seq& q = *seqs[i];
      const int32_t tok = tok_[i];
      const int64_t slot = (int64_t)q.index * c_.max_new_tokens + q.n_new;
      o_.tokens[slot] = tok;
      if (o_.logprobs) o_.logprobs[slot] = slp_[i];
      if (o_.policy_logprobs) o_.policy_logprobs[slot] = plp_[i];
      if (o_.step_logits) std::memcpy(o_.step_logits + slot * V, hlogits_.data() + (size_t)i * V, sizeof(float) * V);
      q.n_new++;
      q.len++;
      q.last = tok;
      int reason = -1;
      if (std::find(c_.eos_ids, c_.eos_ids + c_.n_eos, tok) != c_.eos_ids + c_.n_eos) reason = RS_STOP_EOS;
      else if (ends_with_stop(q)) reason = RS_STOP_SEQUENCE;
      else if (q.n_new >= c_.max_new_tokens) reason = RS_STOP_LENGTH;
      else if (q.len >= d_.maxPos) reason = RS_STOP_CONTEXT;
      if (reason >= 0) finish(q, reason);
    }
  }

  void prefill(std::vector<Seq*>& pack, const int32_t* flat, const int64_t* offsets) {
    cudaStream_t s = m_->stream;
    const int KVD = d_.KV * d_.hd;
    int T = 0;
    std::vector<int32_t> tokens, segs, dst, last_rows;
    for (Seq* q : pack) {
      segs.push_back(T);
      tokens.insert(tokens.end(), flat + offsets[q->index], flat + offsets[q->index + 1]);
      for (int p = 0; p < q->P; p++) dst.push_back((int32_t)(q->base + p));
      T += q->P;
      last_rows.push_back(T - 1);
    }
    prepare_row(m_, tokens.data(), T, segs.data(), (int)segs.size());
    const int n = (int)pack.size();
    std::vector<int32_t> ints(dst);
    ints.insert(ints.end(), last_rows.begin(), last_rows.end());
    upload(ints_, ints.data(), ints.size(), s, "prefill indices");
    const int32_t* dst_dev = ints_.p;
    const int32_t* last_dev = ints_.p + T;
    const KvSink sink = [&](int l, const float* k, const float* v, int ld) {
      kv_store(s, k, v, ld, KVD, T, dst_dev, layer_k(l), layer_v(l));
    };
    forward_layers(m_, T, true, &sink);
    X_.reserve((size_t)n * d_.D, "prefill head input");
    logits_.reserve((size_t)n * d_.V, "generate logits");
    gather_rows(s, m_->acts.lnf, d_.D, last_dev, n, d_.D, X_.p);
    linear_fwd(m_->gemm, X_.p, n, d_.D, m_->P() + m_->off_head, m_->Wb(m_->off_head), d_.V, nullptr, logits_.p, true, "lm_head");
    sample(pack, logits_.p);
  }

  // One decode step for every active sequence: feed its last token at position len - 1.
  void decode(std::vector<Seq*>& act) {
    cudaStream_t s = m_->stream;
    GemmCtx& g = m_->gemm;
    const int B = (int)act.size(), D = d_.D, A = d_.H * d_.hd, KVD = d_.KV * d_.hd, QKV = d_.QKV, I = d_.I;
    const float* P = m_->P();
    // One allocation for the step's activations (sized for this B; the first step has the largest B).
    const size_t per_row = (size_t)4 * D + 1 + QKV + A + 2 * I + I + d_.V;
    act_.reserve(per_row * B, "decode activations");
    float* X = act_.p;
    float* Xmid = X + (size_t)B * D;
    float* h = Xmid + (size_t)B * D;
    float* tmp = h + (size_t)B * D;
    float* rstd = tmp + (size_t)B * D;
    float* qkv = rstd + B;
    float* att = qkv + (size_t)B * QKV;
    float* gu = att + (size_t)B * A;
    float* hm = gu + (size_t)B * 2 * I;
    float* logits = hm + (size_t)B * I;
    std::vector<int32_t> ints((size_t)5 * B);
    for (int b = 0; b < B; b++) {
      const Seq& q = *act[b];
      ints[b] = q.last;                                   // tokens
      ints[B + b] = q.len - 1;                            // positions
      ints[2 * B + b] = (int32_t)q.base;                  // first cache row
      ints[3 * B + b] = q.len;                            // keys to attend (this token included)
      ints[4 * B + b] = (int32_t)(q.base + q.len - 1);    // where this token's k / v go
    }
    upload(ints_, ints.data(), ints.size(), s, "decode indices");
    const int32_t* toks = ints_.p;
    const int32_t* pos = toks + B;
    const int32_t* base = pos + B;
    const int32_t* nkeys = base + B;
    const int32_t* dst = nkeys + B;

    embedding_fwd(s, P + m_->off_embed, D, toks, B, X);
    rmsnorm_fwd(s, X, nullptr, P + m_->lo[0].ln1, B, D, d_.eps, nullptr, h, rstd);
    for (int l = 0; l < d_.L; l++) {
      const LayerOffsets& o = m_->lo[l];
      linear_fwd(g, h, B, D, P + o.wqkv, m_->Wb(o.wqkv), QKV, o.bqkv >= 0 ? P + o.bqkv : nullptr, qkv, true, "decode qkv_proj");
      rope_apply(s, qkv, B, QKV, d_.H, d_.hd, pos, m_->rope, false);
      rope_apply(s, qkv + A, B, QKV, d_.KV, d_.hd, pos, m_->rope, false);
      kv_store(s, qkv + A, qkv + A + KVD, QKV, KVD, B, dst, layer_k(l), layer_v(l));
      attention_decode(s, qkv, QKV, layer_k(l), layer_v(l), KVD, base, nkeys, B, d_.H, d_.KV, d_.hd, att, A);
      linear_fwd(g, att, B, A, P + o.wo, m_->Wb(o.wo), D, nullptr, tmp, true, "decode o_proj");
      rmsnorm_fwd(s, X, tmp, P + o.ln2, B, D, d_.eps, Xmid, h, rstd);
      linear_fwd(g, h, B, D, P + o.wgu, m_->Wb(o.wgu), 2 * I, nullptr, gu, true, "decode gate_up_proj");
      swiglu_fwd(s, gu, gu + I, 2 * (int64_t)I, hm, I, B, I);
      linear_fwd(g, hm, B, I, P + o.wdown, m_->Wb(o.wdown), D, nullptr, tmp, true, "decode down_proj");
      const bool last = l + 1 == d_.L;
      rmsnorm_fwd(s, Xmid, tmp, P + (last ? m_->off_norm : m_->lo[l + 1].ln1), B, D, d_.eps, X, h, rstd);
    }
    linear_fwd(g, h, B, D, P + m_->off_head, m_->Wb(m_->off_head), d_.V, nullptr, logits, true, "decode lm_head");
    sample(act, logits);
  }

 private:
  float* layer_k(int l) { return kpool_.p + (size_t)l * rows_ * d_.KV * d_.hd; }
  float* layer_v(int l) { return vpool_.p + (size_t)l * rows_ * d_.KV * d_.hd; }

  bool ends_with_stop(const Seq& q) const {
    const int32_t* gen = o_.tokens + (int64_t)q.index * c_.max_new_tokens;
    for (int j = 0; j < c_.n_stop; j++) {
      const int32_t* st = c_.stop_flat + c_.stop_offsets[j];
      const int n = c_.stop_offsets[j + 1] - c_.stop_offsets[j];
      if (n <= q.n_new && std::equal(st, st + n, gen + q.n_new - n)) return true;
    }
    return false;
  }

  rs_model* m_;
  const Dims& d_;
  int limit_ = 0;  // ids [0, limit_) are candidates
  const rs_generate_config& c_;
  rs_generate_output& o_;
  SampleParams sp_;
  bool host_sampling_ = false;
  int64_t rows_ = 0;
  DevBuf<float> kpool_, vpool_, X_, logits_, act_, sbuf_;
  DevBuf<double> dev_u_;
  DevBuf<int32_t> dev_tok_, ints_;
  std::vector<float> hlogits_, slp_, plp_;
  std::vector<int32_t> tok_;
};

}  // namespace

}  // namespace rsc

using namespace rsc;

extern "C" {

int32_t rs_model_generate(rs_model* m, const int32_t* flat, const int64_t* off, int32_t n, const uint64_t* seeds, const rs_generate_config* c,
                          rs_generate_output* o, rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: null model");
  if (int32_t st = rs_shared::check_generate_request(m->d, flat, off, n, c, o, err)) return st;
  rs_generate_output out = *o;
  if (!c->return_logits) out.step_logits = nullptr;
  return guard(err, "generate", [&] {
    model_enter(m);
    const Dims& d = m->d;
    Generator gen(m, *c, out);
    std::vector<std::unique_ptr<Seq>> seqs;
    std::vector<Seq*> todo;
    int64_t rows = 0;
    int max_cap = 0;
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
        s->base = rows;
        rows += s->cap;
        max_cap = std::max(max_cap, s->cap);
        todo.push_back(s.get());
      }
      seqs.push_back(std::move(s));
    }
    if (todo.empty()) return;
    if (rows > INT32_MAX) raise(RS_ERR_UNSUPPORTED, "generate: %lld KV-cache rows is too many for one call", (long long)rows);
    gen.alloc_pool(rows);
    m->rope.ensure(std::min(d.maxPos, std::max(64, max_cap)), d.rd, d.theta, m->stream);
    rs_shared::prefill_then_decode(gen, todo, flat, off);
    sync_stream(m->stream, "generate");
  });
}

}  // extern "C"
