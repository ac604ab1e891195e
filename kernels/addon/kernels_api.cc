// The stand-alone layer kernels as JS methods: (typed arrays, sizes) in, results written into the given
// output arrays. Synchronous (test-sized), except sgemmAsync for benchmark-sized products.
#include <memory>
#include <vector>

#include "api.h"
#include "args.h"

namespace {
constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
size_t mul(size_t a, size_t b) { return a * b; }
size_t mat_len(int64_t rows, int64_t ld, int64_t cols) { return rows <= 0 || cols <= 0 ? 0 : (size_t)((rows - 1) * ld + cols); }
}  // namespace

rs_loss_spec read_loss_spec(const Args& a, Napi::Object o) {
  rs_loss_spec s{};
  s.kind = (int32_t)a.int_in(field_num(a, o, "kind"), "loss kind", 0, RS_LOSS_KIND_COUNT - 1);
  s.mask_low = (float)field_num(a, o, "maskLow");
  s.mask_high = (float)field_num(a, o, "maskHigh");
  s.clip_eps = (float)field_num(a, o, "clipEps");
  s.clip_eps_high = (float)field_num(a, o, "clipEpsHigh");
  s.kl_coef = (float)field_num(a, o, "klCoef");
  s.normalizer = field_num(a, o, "normalizer");
  return s;
}

Napi::Object loss_stats_object(Napi::Env env, const rs_loss_stats& s) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("loss", s.loss);
  o.Set("lossTokens", s.loss_tokens);
  o.Set("maskedTokens", s.masked_tokens);
  o.Set("entropySum", s.entropy_sum);
  o.Set("mismatchKlSum", s.mismatch_kl_sum);
  o.Set("logpSum", s.logp_sum);
  o.Set("ratioSum", s.ratio_sum);
  return o;
}

#define CALL(fn, ...)                        \
  do {                                       \
    rs_error call_err{};                     \
    int32_t call_st = be->fn(__VA_ARGS__, &call_err); \
    check_status(info.Env(), #fn, call_st, call_err); \
  } while (0)

Napi::Value kernel_embeddingFwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "embeddingFwd");  // (table, V, D, ids, out)
  const int32_t V = a.i32(1, "V", 1, kMax), D = a.i32(2, "D", 1, kMax);
  auto table = a.arr<float>(0, "table", mul(V, D));
  auto ids = a.arr<int32_t>(3, "ids", 1);
  auto out = a.arr<float>(4, "out", mul(ids.len, D));
  CALL(rs_embedding_fwd, table.data, V, D, ids.data, (int32_t)ids.len, out.data);
  return info.Env().Undefined();
}

Napi::Value kernel_embeddingBwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "embeddingBwd");  // (dout, ids, V, D, dtable)
  const int32_t V = a.i32(2, "V", 1, kMax), D = a.i32(3, "D", 1, kMax);
  auto ids = a.arr<int32_t>(1, "ids", 1);
  auto dout = a.arr<float>(0, "dout", mul(ids.len, D));
  auto dtable = a.arr<float>(4, "dtable", mul(V, D));
  CALL(rs_embedding_bwd, dout.data, ids.data, (int32_t)ids.len, V, D, dtable.data);
  return info.Env().Undefined();
}

Napi::Value kernel_rmsnormFwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "rmsnormFwd");  // (x, w, T, D, eps, y, rstd)
  const int32_t T = a.i32(2, "T", 1, kMax), D = a.i32(3, "D", 1, kMax);
  const size_t n = mul(T, D);
  auto x = a.arr<float>(0, "x", n);
  auto w = a.arr<float>(1, "w", D);
  auto y = a.arr<float>(5, "y", n);
  auto rstd = a.arr<float>(6, "rstd", T);
  CALL(rs_rmsnorm_fwd, x.data, w.data, T, D, (float)a.num(4, "eps"), y.data, rstd.data);
  return info.Env().Undefined();
}

Napi::Value kernel_rmsnormBwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "rmsnormBwd");  // (dy, x, w, rstd, T, D, dx, dw|null)
  const int32_t T = a.i32(4, "T", 1, kMax), D = a.i32(5, "D", 1, kMax);
  const size_t n = mul(T, D);
  auto dy = a.arr<float>(0, "dy", n);
  auto x = a.arr<float>(1, "x", n);
  auto w = a.arr<float>(2, "w", D);
  auto rstd = a.arr<float>(3, "rstd", T);
  auto dx = a.arr<float>(6, "dx", n);
  auto dw = a.arr<float>(7, "dw", D, true);
  CALL(rs_rmsnorm_bwd, dy.data, x.data, w.data, rstd.data, T, D, dx.data, dw.data);
  return info.Env().Undefined();
}

Napi::Value kernel_residualRmsnormFwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "residualRmsnormFwd");  // (x, residual, w, T, D, eps, r, y, rstd)
  const int32_t T = a.i32(3, "T", 1, kMax), D = a.i32(4, "D", 1, kMax);
  const size_t n = mul(T, D);
  auto x = a.arr<float>(0, "x", n);
  auto res = a.arr<float>(1, "residual", n);
  auto w = a.arr<float>(2, "w", D);
  auto r = a.arr<float>(6, "r", n);
  auto y = a.arr<float>(7, "y", n);
  auto rstd = a.arr<float>(8, "rstd", T);
  CALL(rs_residual_rmsnorm_fwd, x.data, res.data, w.data, T, D, (float)a.num(5, "eps"), r.data, y.data, rstd.data);
  return info.Env().Undefined();
}

Napi::Value kernel_residualRmsnormBwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "residualRmsnormBwd");  // (dy, drIn|null, r, w, rstd, T, D, dx, dw|null)
  const int32_t T = a.i32(5, "T", 1, kMax), D = a.i32(6, "D", 1, kMax);
  const size_t n = mul(T, D);
  auto dy = a.arr<float>(0, "dy", n);
  auto dr = a.arr<float>(1, "drIn", n, true);
  auto r = a.arr<float>(2, "r", n);
  auto w = a.arr<float>(3, "w", D);
  auto rstd = a.arr<float>(4, "rstd", T);
  auto dx = a.arr<float>(7, "dx", n);
  auto dw = a.arr<float>(8, "dw", D, true);
  CALL(rs_residual_rmsnorm_bwd, dy.data, dr.data, r.data, w.data, rstd.data, T, D, dx.data, dw.data);
  return info.Env().Undefined();
}

namespace {
struct GemmArgs {
  int32_t ta, tb, M, N, K, lda, ldb, ldc, impl;
  float alpha, beta;
  Arr<float> A, B, C;
};
GemmArgs read_gemm(const Args& a) {  // (transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, impl)
  GemmArgs g;
  g.ta = a.flag(0, "transA");
  g.tb = a.flag(1, "transB");
  g.M = a.i32(2, "M", 0, kMax);
  g.N = a.i32(3, "N", 0, kMax);
  g.K = a.i32(4, "K", 0, kMax);
  g.alpha = (float)a.num(5, "alpha");
  g.lda = a.i32(7, "lda", 1, kMax);
  g.ldb = a.i32(9, "ldb", 1, kMax);
  g.beta = (float)a.num(10, "beta");
  g.ldc = a.i32(12, "ldc", 1, kMax);
  g.impl = a.i32(13, "impl", 0, 2);
  const int64_t a_rows = g.ta ? g.K : g.M, a_cols = g.ta ? g.M : g.K;
  const int64_t b_rows = g.tb ? g.N : g.K, b_cols = g.tb ? g.K : g.N;
  if (g.lda < a_cols || g.ldb < b_cols || g.ldc < g.N) a.range_error("a leading dimension is smaller than its row length");
  g.A = a.arr<float>(6, "A", mat_len(a_rows, g.lda, a_cols));
  g.B = a.arr<float>(8, "B", mat_len(b_rows, g.ldb, b_cols));
  g.C = a.arr<float>(11, "C", mat_len(g.M, g.ldc, g.N));
  return g;
}
}  // namespace

Napi::Value kernel_sgemm(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "sgemm");
  GemmArgs g = read_gemm(a);
  CALL(rs_sgemm, g.ta, g.tb, g.M, g.N, g.K, g.alpha, g.A.data, g.lda, g.B.data, g.ldb, g.beta, g.C.data, g.ldc, g.impl);
  return info.Env().Undefined();
}

namespace {
// Runs one sgemm on a libuv thread; the typed arrays stay referenced (so alive, zero-copy) until it ends.
class GemmWork : public Napi::AsyncWorker {
 public:
  GemmWork(Napi::Env env, Backend* be, GemmArgs g, int threads, std::vector<Napi::Reference<Napi::Value>> refs)
      : Napi::AsyncWorker(env, "rollstream:sgemm"), deferred_(Napi::Promise::Deferred::New(env)), be_(be), g_(g), threads_(threads),
        refs_(std::move(refs)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    be_->rs_set_num_threads(threads_);
    rs_error e{};
    if (be_->rs_sgemm(g_.ta, g_.tb, g_.M, g_.N, g_.K, g_.alpha, g_.A.data, g_.lda, g_.B.data, g_.ldb, g_.beta, g_.C.data, g_.ldc, g_.impl, &e))
      SetError(e.message);
  }
  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error& err) override { deferred_.Reject(err.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  Backend* be_;
  GemmArgs g_;
  int threads_;
  std::vector<Napi::Reference<Napi::Value>> refs_;
};
}  // namespace

Napi::Value kernel_sgemmAsync(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "sgemmAsync");  // sgemm's arguments, then threads
  GemmArgs g = read_gemm(a);
  const int threads = a.i32(14, "threads", 0, 4096);
  std::vector<Napi::Reference<Napi::Value>> refs;
  for (int i : {6, 8, 11}) refs.push_back(Napi::Persistent(info[i]));
  auto* w = new GemmWork(info.Env(), be, g, threads, std::move(refs));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value kernel_matmulFwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "matmulFwd");  // (x, W, b|null, N, in, out, y)
  const int32_t N = a.i32(3, "N", 1, kMax), in = a.i32(4, "in", 1, kMax), out = a.i32(5, "out", 1, kMax);
  auto x = a.arr<float>(0, "x", mul(N, in));
  auto W = a.arr<float>(1, "W", mul(out, in));
  auto b = a.arr<float>(2, "b", out, true);
  auto y = a.arr<float>(6, "y", mul(N, out));
  CALL(rs_matmul_fwd, x.data, W.data, b.data, N, in, out, y.data);
  return info.Env().Undefined();
}

Napi::Value kernel_matmulBwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "matmulBwd");  // (dy, x, W, N, in, out, dx|null, dW|null, db|null)
  const int32_t N = a.i32(3, "N", 1, kMax), in = a.i32(4, "in", 1, kMax), out = a.i32(5, "out", 1, kMax);
  auto dy = a.arr<float>(0, "dy", mul(N, out));
  auto x = a.arr<float>(1, "x", mul(N, in));
  auto W = a.arr<float>(2, "W", mul(out, in));
  auto dx = a.arr<float>(6, "dx", mul(N, in), true);
  auto dW = a.arr<float>(7, "dW", mul(out, in), true);
  auto db = a.arr<float>(8, "db", out, true);
  CALL(rs_matmul_bwd, dy.data, x.data, W.data, N, in, out, dx.data, dW.data, db.data);
  return info.Env().Undefined();
}

static Napi::Value rope(Backend* be, const Napi::CallbackInfo& info, const char* name, bool bwd) {
  Args a(info, name);  // (x, T, H, hd, positions, theta, y)
  const int32_t T = a.i32(1, "T", 1, kMax), H = a.i32(2, "heads", 1, kMax), hd = a.i32(3, "headDim", 1, kMax);
  const size_t n = mul(mul(T, H), hd);
  auto x = a.arr<float>(0, "x", n);
  auto pos = a.arr<int32_t>(4, "positions", T);
  auto y = a.arr<float>(6, "y", n);
  const double theta = a.num(5, "theta");
  if (bwd) CALL(rs_rope_bwd, x.data, T, H, hd, pos.data, theta, y.data);
  else CALL(rs_rope_fwd, x.data, T, H, hd, pos.data, theta, y.data);
  return info.Env().Undefined();
}
Napi::Value kernel_ropeFwd(Backend* be, const Napi::CallbackInfo& info) { return rope(be, info, "ropeFwd", false); }
Napi::Value kernel_ropeBwd(Backend* be, const Napi::CallbackInfo& info) { return rope(be, info, "ropeBwd", true); }

Napi::Value kernel_attentionFwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "attentionFwd");  // (q, k, v, T, H, KV, hd, segStarts, out, lse)
  const int32_t T = a.i32(3, "T", 1, kMax), H = a.i32(4, "heads", 1, kMax), KV = a.i32(5, "kvHeads", 1, kMax), hd = a.i32(6, "headDim", 1, kMax);
  auto q = a.arr<float>(0, "q", mul(mul(T, H), hd));
  auto k = a.arr<float>(1, "k", mul(mul(T, KV), hd));
  auto v = a.arr<float>(2, "v", mul(mul(T, KV), hd));
  auto seg = a.arr<int32_t>(7, "segStarts", 1);
  auto out = a.arr<float>(8, "out", mul(mul(T, H), hd));
  auto lse = a.arr<float>(9, "lse", mul(T, H));
  CALL(rs_attention_fwd, q.data, k.data, v.data, T, H, KV, hd, seg.data, (int32_t)seg.len, out.data, lse.data);
  return info.Env().Undefined();
}

Napi::Value kernel_attentionBwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "attentionBwd");  // (dout, q, k, v, out, lse, T, H, KV, hd, segStarts, dq, dk, dv)
  const int32_t T = a.i32(6, "T", 1, kMax), H = a.i32(7, "heads", 1, kMax), KV = a.i32(8, "kvHeads", 1, kMax), hd = a.i32(9, "headDim", 1, kMax);
  const size_t nq = mul(mul(T, H), hd), nk = mul(mul(T, KV), hd);
  auto dout = a.arr<float>(0, "dout", nq);
  auto q = a.arr<float>(1, "q", nq);
  auto k = a.arr<float>(2, "k", nk);
  auto v = a.arr<float>(3, "v", nk);
  auto out = a.arr<float>(4, "out", nq);
  auto lse = a.arr<float>(5, "lse", mul(T, H));
  auto seg = a.arr<int32_t>(10, "segStarts", 1);
  auto dq = a.arr<float>(11, "dq", nq);
  auto dk = a.arr<float>(12, "dk", nk);
  auto dv = a.arr<float>(13, "dv", nk);
  CALL(rs_attention_bwd, dout.data, q.data, k.data, v.data, out.data, lse.data, T, H, KV, hd, seg.data, (int32_t)seg.len, dq.data, dk.data, dv.data);
  return info.Env().Undefined();
}

Napi::Value kernel_swigluFwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "swigluFwd");  // (gate, up, h)
  auto gate = a.arr<float>(0, "gate", 1);
  auto up = a.arr<float>(1, "up", gate.len);
  auto h = a.arr<float>(2, "h", gate.len);
  CALL(rs_swiglu_fwd, gate.data, up.data, (int64_t)gate.len, h.data);
  return info.Env().Undefined();
}

Napi::Value kernel_swigluBwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "swigluBwd");  // (dh, gate, up, dgate, dup)
  auto gate = a.arr<float>(1, "gate", 1);
  auto dh = a.arr<float>(0, "dh", gate.len);
  auto up = a.arr<float>(2, "up", gate.len);
  auto dgate = a.arr<float>(3, "dgate", gate.len);
  auto dup = a.arr<float>(4, "dup", gate.len);
  CALL(rs_swiglu_bwd, dh.data, gate.data, up.data, (int64_t)gate.len, dgate.data, dup.data);
  return info.Env().Undefined();
}

Napi::Value kernel_lossFwdBwd(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "lossFwdBwd");  // (logits, N, V, targets, mask, adv|null, slp|null, spec, dlogits|null, tokenLogp|null)
  const int32_t N = a.i32(1, "N", 1, kMax), V = a.i32(2, "V", 1, kMax);
  auto logits = a.arr<float>(0, "logits", mul(N, V));
  auto tg = a.arr<int32_t>(3, "targets", N);
  auto mask = a.arr<uint8_t>(4, "mask", N);
  auto adv = a.arr<float>(5, "advantages", N, true);
  auto slp = a.arr<float>(6, "samplerLogprobs", N, true);
  rs_loss_spec spec = read_loss_spec(a, a.obj(7, "spec"));
  auto dl = a.arr<float>(8, "dlogits", mul(N, V), true);
  auto lp = a.arr<float>(9, "tokenLogprobs", N, true);
  rs_loss_stats st{};
  CALL(rs_loss_fwd_bwd, logits.data, N, V, tg.data, mask.data, adv.data, slp.data, &spec, dl.data, lp.data, &st);
  return loss_stats_object(info.Env(), st);
}

Napi::Value kernel_gradNorm(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "gradNorm");  // (g)
  auto g = a.arr<float>(0, "g", 0);
  double out = 0;
  CALL(rs_grad_norm, g.data, (int64_t)g.len, &out);
  return Napi::Number::New(info.Env(), out);
}

Napi::Value kernel_adamw(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "adamw");  // (p, g, m, v, lr, beta1, beta2, eps, weightDecay, step, gradScale)
  auto p = a.arr<float>(0, "p", 0);
  auto g = a.arr<float>(1, "g", p.len);
  auto m = a.arr<float>(2, "m", p.len);
  auto v = a.arr<float>(3, "v", p.len);
  const int64_t step = a.int_in(a.num(9, "step"), "step", 1, (int64_t)1 << 50);
  CALL(rs_adamw, p.data, g.data, m.data, v.data, (int64_t)p.len, (float)a.num(4, "lr"), (float)a.num(5, "beta1"), (float)a.num(6, "beta2"),
       (float)a.num(7, "eps"), (float)a.num(8, "weightDecay"), step, (float)a.num(10, "gradScale"));
  return info.Env().Undefined();
}
