// The CPU side of the engine (kernels.h, rs_engine_*): the KV block pool in host memory and one forward over a
// step's rows. Every product runs on our own sgemm (never BLAS) and every other kernel is per row, so a row's
// values do not depend on the other rows of the step; attention reads through block tables (paged_attention.cpp).
// The scheduling, caching and sampling order are the shared engine (shared/engine_core.h).
#include <memory>

#include "engine.h"
#include "paged_attention.h"
#include "sampling.h"

namespace rs {

namespace {

using rs_shared::SampleJob;
using rs_shared::StepRows;

class CpuRunner : public rs_shared::EngineRunner {
 public:
  CpuRunner(rs_model* m, int n_blocks, int bs) : m_(m), d_(m->d) {
    kv_.bs = bs;
    kv_.KVD = d_.KV * d_.hd;
    kv_.block_floats = (int64_t)d_.L * 2 * bs * kv_.KVD;
    if (!pool_.resize((size_t)n_blocks * kv_.block_floats)) throw std::bad_alloc();
    kv_.pool = pool_.p;
  }

  void copy_block(int src, int dst) override {
    std::memcpy(kv_.layer(dst, 0), kv_.layer(src, 0), sizeof(float) * kv_.block_floats);
  }

  void sample(std::vector<SampleJob>& jobs) override {
    const int n = (int)jobs.size();
#pragma omp parallel num_threads(m_->threads)
    {
      SampleScratch scratch;
#pragma omp for schedule(dynamic, 1)
      for (int i = 0; i < n; i++) {
        SampleJob& j = jobs[i];
        j.token = sample_token(j.logits, j.limit, j.sp, j.u, &j.logprob, &j.policy_logprob, scratch);
      }
    }
  }

  void forward(const StepRows& rows, float* logits) override {
    const int R = (int)rows.tokens.size(), D = d_.D, nt = m_->threads;
    const float* P = m_->params.p;
    resize(R);
    m_->rope.ensure(d_.maxPos, d_.rd, d_.theta);
    embedding_fwd(P + m_->off_embed, D, rows.tokens.data(), R, X_.data(), nt);
    rmsnorm_fwd(X_.data(), P + m_->lo[0].ln1, R, D, d_.eps, h_.data(), rstd_.data(), nt);
    for (int l = 0; l < d_.L; l++) layer(l, rows, R);
    const int n = (int)rows.sample_rows.size();
    for (int i = 0; i < n; i++) std::memcpy(sel_.data() + (size_t)i * D, h_.data() + (size_t)rows.sample_rows[i] * D, sizeof(float) * D);
    linear_fwd(GemmImpl::Own, sel_.data(), n, D, P + m_->off_head, d_.V, nullptr, logits, nt);
  }

 private:
  void resize(int R) {
    const size_t D = d_.D;
    X_.resize(R * D);
    Xmid_.resize(R * D);
    h_.resize(R * D);
    tmp_.resize(R * D);
    sel_.resize(R * D);
    rstd_.resize(R);
    qkv_.resize((size_t)R * d_.QKV);
    att_.resize((size_t)R * d_.H * d_.hd);
    gu_.resize((size_t)R * 2 * d_.I);
    hm_.resize((size_t)R * d_.I);
  }

  // One decoder layer over the rows; h_ holds the layer's normed input and receives the next one's.
  void layer(int l, const StepRows& rows, int R) {
    const int D = d_.D, A = d_.H * d_.hd, KVD = kv_.KVD, QKV = d_.QKV, nt = m_->threads;
    const float* P = m_->params.p;
    const LayerOffsets& o = m_->lo[l];
    linear_fwd(GemmImpl::Own, h_.data(), R, D, P + o.wqkv, QKV, o.bqkv >= 0 ? P + o.bqkv : nullptr, qkv_.data(), nt);
    qk_norm_fwd(m_, l, qkv_.data(), R, nullptr, nullptr);
    rope_apply(qkv_.data(), R, QKV, d_.H, d_.hd, rows.pos.data(), m_->rope, false, nt);
    rope_apply(qkv_.data() + A, R, QKV, d_.KV, d_.hd, rows.pos.data(), m_->rope, false, nt);
    // Every row's KV is stored before any row attends: rows of one sequence in this step read each other's.
    paged_kv_store(kv_, l, qkv_.data() + A, qkv_.data() + A + KVD, QKV, R, rows.pos.data(), rows.seq.data(), rows.tables.data(), nt);
    paged_attention(kv_, l, qkv_.data(), QKV, R, d_.H, d_.KV, d_.hd, rows.pos.data(), rows.seq.data(), rows.tables.data(), att_.data(), A, nt);
    linear_fwd(GemmImpl::Own, att_.data(), R, A, P + o.wo, D, nullptr, tmp_.data(), nt);
    residual_rmsnorm_fwd(X_.data(), tmp_.data(), P + o.ln2, R, D, d_.eps, Xmid_.data(), h_.data(), rstd_.data(), nt);
    mlp_fwd(m_, GemmImpl::Own, l, h_.data(), R, gu_.data(), hm_.data(), moe_, tmp_.data());
    const bool last = l + 1 == d_.L;
    residual_rmsnorm_fwd(Xmid_.data(), tmp_.data(), P + (last ? m_->off_norm : m_->lo[l + 1].ln1), R, D, d_.eps, X_.data(), h_.data(),
                         rstd_.data(), nt);
  }

  rs_model* m_;
  const Dims& d_;
  PagedKv kv_{};
  FloatBuf pool_;
  std::vector<float> X_, Xmid_, h_, tmp_, sel_, rstd_, qkv_, att_, gu_, hm_;
  MoeBuf moe_;
};

}  // namespace

std::unique_ptr<rs_shared::EngineRunner> make_cpu_runner(rs_model* m, int n_blocks, int block_size) {
  return std::make_unique<CpuRunner>(m, n_blocks, block_size);
}

}  // namespace rs

struct rs_engine {
  rs_shared::Engine core;
};

using namespace rs;

extern "C" {

rs_engine* rs_engine_create(rs_model* m, const rs_engine_config* cfg, rs_error* err) {
  if (!m) {
    fail(err, RS_ERR_INVALID_ARGUMENT, "engine: null model");
    return nullptr;
  }
  rs_shared::EngineParams p;
  if (rs_shared::read_engine_config(cfg, m->d, &p, err)) return nullptr;
  try {
    auto runner = make_cpu_runner(m, p.n_blocks, p.block_size);
    auto* e = new rs_engine{rs_shared::Engine(m->d, p, std::move(runner))};
    ok(err);
    return e;
  } catch (const std::bad_alloc&) {
    fail(err, RS_ERR_OUT_OF_MEMORY, "engine: out of memory for %d KV blocks of %d tokens", p.n_blocks, p.block_size);
    return nullptr;
  }
}

void rs_engine_free(rs_engine* e) { delete e; }

int32_t rs_engine_add(rs_engine* e, const rs_engine_request* req, int64_t* ids, rs_error* err) {
  if (!e) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: null engine");
  try {
    return e->core.add(req, ids, err);
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "engine add: out of memory");
  }
}

int32_t rs_engine_cancel(rs_engine* e, int64_t id, rs_error* err) {
  if (!e) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine cancel: null engine");
  return e->core.cancel(id, err);
}

int32_t rs_engine_set_version(rs_engine* e, int64_t version, int32_t mode, rs_error* err) {
  if (!e) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine set_version: null engine");
  return e->core.set_version(version, mode, err);
}

int32_t rs_engine_step(rs_engine* e, rs_engine_step_output* out, rs_error* err) {
  if (!e) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine step: null engine");
  return e->core.step(out, err);
}

int32_t rs_engine_get_stats(const rs_engine* e, rs_engine_stats* out, rs_error* err) {
  if (!e || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine stats: null argument");
  e->core.stats(out);
  return ok(err);
}

}  // extern "C"
