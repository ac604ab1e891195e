// The CUDA side of the engine (kernels.h, rs_engine_*; the twin of cpu/engine.cpp): the KV block pool in device
// memory and one forward over a step's rows, every product on our own row-independent gemm (never cuBLAS, whose
// algorithm depends on the batch size) and attention through block tables (paged_attention.cu). Logits of the
// sampled rows come back to the host, where the shared sampler draws (as the CPU backend does). Scheduling,
// caching and stop rules are the shared engine (shared/engine_core.h).
#include <algorithm>
#include <memory>
#include <thread>

#include "../shared/engine_core.h"
#include "engine.cuh"
#include "model.cuh"
#include "paged_attention.cuh"
#include "sampling.cuh"

namespace rsc {

namespace {

using rs_shared::SampleJob;
using rs_shared::StepRows;

class CudaRunner : public rs_shared::EngineRunner {
 public:
  CudaRunner(rs_model* m, int n_blocks, int bs) : m_(m), d_(m->d) {
    kv_.L = d_.L;
    kv_.bs = bs;
    kv_.KVD = d_.KV * d_.hd;
    pool_.reserve((size_t)n_blocks * kv_.block_floats(), "engine KV pool");
    kv_.pool = pool_.p;
  }

  void copy_block(int src, int dst) override {
    const int64_t n = kv_.block_floats();
    check_cuda(cudaMemcpyAsync(pool_.p + dst * n, pool_.p + src * n, sizeof(float) * n, cudaMemcpyDeviceToDevice, m_->stream), "engine block copy");
  }

  // Host threads, each sampling every nt-th job (the jobs differ in their parameters, so no one GPU launch fits all).
  void sample(std::vector<SampleJob>& jobs) override {
    const int n = (int)jobs.size(), nt = std::max(1, std::min(m_->threads, n));
    std::vector<char> failed(nt, 0);
    auto work = [&](int w) {
      try {  // an exception escaping a std::thread would terminate the process
        std::vector<int32_t> idx;
        std::vector<float> p;
        for (int i = w; i < n; i += nt) {
          SampleJob& j = jobs[i];
          j.token = sample_token_host(j.logits, j.limit, j.sp, j.u, &j.logprob, &j.policy_logprob, idx, p);
        }
      } catch (...) {
        failed[w] = 1;
      }
    };
    std::vector<std::thread> pool;
    for (int w = 1; w < nt; w++) pool.emplace_back(work, w);
    work(0);
    for (auto& t : pool) t.join();
    for (char f : failed)
      if (f) raise(RS_ERR_OUT_OF_MEMORY, "out of host memory while sampling");
  }

  void forward(const StepRows& rows, float* logits) override {
    model_enter(m_);  // uploads weights the caller wrote since the last call
    cudaStream_t s = m_->stream;
    const int R = (int)rows.tokens.size(), n = (int)rows.sample_rows.size();
    m_->rope.ensure(d_.maxPos, d_.rd, d_.theta, s);
    const PagedRows pr = upload_rows(rows, s);
    float* h = activations(R);
    logits_.reserve((size_t)n * d_.V, "engine logits");
    embedding_fwd(s, m_->P() + m_->off_embed, d_.D, ints_.p, R, X_);
    rmsnorm_fwd(s, X_, nullptr, m_->P() + m_->lo[0].ln1, R, d_.D, d_.eps, nullptr, h, rstd_);
    for (int l = 0; l < d_.L; l++) layer(l, pr, R, h);
    float* sel = qkv_;  // free after the last layer; the LM head input is n <= R rows of D <= QKV
    gather_rows(s, h, d_.D, sample_dev_, n, d_.D, sel);
    linear_fwd(m_->gemm, sel, n, d_.D, m_->P() + m_->off_head, m_->Wb(m_->off_head), d_.V, nullptr, logits_.p, true, "engine lm_head");
    to_host(logits, logits_.p, sizeof(float) * (size_t)n * d_.V, s, "engine logits");
  }

 private:
  // tokens [R] | pos [R] | seq [R] | sample rows [n] | table offsets [S] | tables (all concatenated), one upload.
  PagedRows upload_rows(const StepRows& rows, cudaStream_t s) {
    const int R = (int)rows.tokens.size(), n = (int)rows.sample_rows.size(), S = (int)rows.tables.size();
    std::vector<int32_t> ints(rows.tokens);
    ints.insert(ints.end(), rows.pos.begin(), rows.pos.end());
    ints.insert(ints.end(), rows.seq.begin(), rows.seq.end());
    ints.insert(ints.end(), rows.sample_rows.begin(), rows.sample_rows.end());
    std::vector<int32_t> lens(S, 0);
    for (int r = 0; r < R; r++) lens[rows.seq[r]] = std::max(lens[rows.seq[r]], rows.pos[r] / kv_.bs + 1);
    int32_t off = 0;
    for (int i = 0; i < S; i++) ints.push_back((off += i ? lens[i - 1] : 0));
    for (int i = 0; i < S; i++) ints.insert(ints.end(), rows.tables[i], rows.tables[i] + lens[i]);
    upload(ints_, ints.data(), ints.size(), s, "engine rows");
    sample_dev_ = ints_.p + 3 * R;
    return PagedRows{ints_.p + R, ints_.p + 2 * R, ints_.p + 3 * R + n + S, ints_.p + 3 * R + n, R};
  }

  // One allocation for the step's activations; returns h (the normed input of the next layer).
  float* activations(int R) {
    const size_t D = d_.D, A = (size_t)d_.H * d_.hd, I = d_.I;
    act_.reserve(R * (4 * D + 1 + d_.QKV + A + 3 * I), "engine activations");
    X_ = act_.p;
    Xmid_ = X_ + R * D;
    float* h = Xmid_ + R * D;
    tmp_ = h + R * D;
    rstd_ = tmp_ + R * D;
    qkv_ = rstd_ + R;
    att_ = qkv_ + (size_t)R * d_.QKV;
    gu_ = att_ + R * A;
    hm_ = gu_ + R * 2 * I;
    return h;
  }

  void layer(int l, const PagedRows& pr, int R, float* h) {
    cudaStream_t s = m_->stream;
    GemmCtx& g = m_->gemm;
    const int D = d_.D, A = d_.H * d_.hd, KVD = kv_.KVD, QKV = d_.QKV;
    const float* P = m_->P();
    const LayerOffsets& o = m_->lo[l];
    linear_fwd(g, h, R, D, P + o.wqkv, m_->Wb(o.wqkv), QKV, o.bqkv >= 0 ? P + o.bqkv : nullptr, qkv_, true, "engine qkv_proj");
    qk_norm_fwd(m_, l, qkv_, R, nullptr, nullptr);
    rope_apply(s, qkv_, R, QKV, d_.H, d_.hd, pr.pos, m_->rope, false);
    rope_apply(s, qkv_ + A, R, QKV, d_.KV, d_.hd, pr.pos, m_->rope, false);
    // Every row's KV is stored before any row attends: rows of one sequence in this step read each other's.
    paged_kv_store(s, kv_, l, qkv_ + A, qkv_ + A + KVD, QKV, pr);
    paged_attention(s, kv_, l, qkv_, QKV, pr, d_.H, d_.KV, d_.hd, att_, A);
    linear_fwd(g, att_, R, A, P + o.wo, m_->Wb(o.wo), D, nullptr, tmp_, true, "engine o_proj");
    rmsnorm_fwd(s, X_, tmp_, P + o.ln2, R, D, d_.eps, Xmid_, h, rstd_);
    mlp_fwd(m_, l, h, R, gu_, hm_, moe_, tmp_, true);  // dense SwiGLU or the MoE block, every product row-independent
    const bool last = l + 1 == d_.L;
    rmsnorm_fwd(s, Xmid_, tmp_, P + (last ? m_->off_norm : m_->lo[l + 1].ln1), R, D, d_.eps, X_, h, rstd_);
  }

  rs_model* m_;
  const Dims& d_;
  PagedKvDev kv_{};
  DevBuf<float> pool_, act_, logits_;
  MoeDev moe_;  // the MoE block's routing and grouped rows, reused by every layer
  DevBuf<int32_t> ints_;
  const int32_t* sample_dev_ = nullptr;
  float *X_ = nullptr, *Xmid_ = nullptr, *tmp_ = nullptr, *rstd_ = nullptr, *qkv_ = nullptr, *att_ = nullptr, *gu_ = nullptr, *hm_ = nullptr;
};

}  // namespace

std::unique_ptr<rs_shared::EngineRunner> make_cuda_runner(rs_model* m, int n_blocks, int block_size) {
  return std::make_unique<CudaRunner>(m, n_blocks, block_size);
}

}  // namespace rsc

struct rs_engine {
  rs_model* model;
  rs_shared::Engine core;
};

using namespace rsc;

namespace {

// Runs an engine call that may throw (a device failure) and may also return a status of its own.
template <class F>
int32_t engine_call(rs_error* err, const char* fn, F&& f) {
  rs_error local{};
  int32_t st = RS_OK;
  if (int32_t g = guard(err, fn, [&] { st = f(&local); })) return g;
  if (st != RS_OK && err) *err = local;
  return st;
}

}  // namespace

extern "C" {

rs_engine* rs_engine_create(rs_model* m, const rs_engine_config* cfg, rs_error* err) {
  if (!m) {
    fail(err, RS_ERR_INVALID_ARGUMENT, "engine: null model");
    return nullptr;
  }
  rs_shared::EngineParams p;
  if (rs_shared::read_engine_config(cfg, m->d, &p, err)) return nullptr;
  rs_engine* e = nullptr;
  guard(err, "engine", [&] {
    model_enter(m);
    e = new rs_engine{m, rs_shared::Engine(m->d, p, make_cuda_runner(m, p.n_blocks, p.block_size))};
  });
  return e;
}

void rs_engine_free(rs_engine* e) { delete e; }

int32_t rs_engine_add(rs_engine* e, const rs_engine_request* req, int64_t* ids, rs_error* err) {
  if (!e) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine add: null engine");
  return engine_call(err, "engine add", [&](rs_error* le) { return e->core.add(req, ids, le); });
}

int32_t rs_engine_cancel(rs_engine* e, int64_t id, rs_error* err) {
  if (!e) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine cancel: null engine");
  return engine_call(err, "engine cancel", [&](rs_error* le) { return e->core.cancel(id, le); });
}

int32_t rs_engine_set_version(rs_engine* e, int64_t version, int32_t mode, rs_error* err) {
  if (!e) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine set_version: null engine");
  return engine_call(err, "engine set_version", [&](rs_error* le) { return e->core.set_version(version, mode, le); });
}

int32_t rs_engine_step(rs_engine* e, rs_engine_step_output* out, rs_error* err) {
  if (!e) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine step: null engine");
  return engine_call(err, "engine step", [&](rs_error* le) {
    const int32_t st = e->core.step(out, le);
    sync_stream(e->model->stream, "engine step");
    return st;
  });
}

int32_t rs_engine_get_stats(const rs_engine* e, rs_engine_stats* out, rs_error* err) {
  if (!e || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "engine stats: null argument");
  e->core.stats(out);
  return ok(err);
}

}  // extern "C"
