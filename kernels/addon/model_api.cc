// The JS class around rs_model*: buffer copies, tensor table, and the long calls (forward, trainMicro,
// step, generate) run on libuv threads and return Promises. Inputs are copied before the work starts and
// outputs are created when it ends, so JS can neither free nor mutate memory the backend is using.
#include <functional>
#include <memory>
#include <vector>

#include "api.h"
#include "args.h"

namespace {

constexpr int64_t kMax = std::numeric_limits<int32_t>::max();

class ModelWrap;

// Generic Promise worker: run() on a libuv thread, done() back on the JS thread.
class ModelWork : public Napi::AsyncWorker {
 public:
  ModelWork(Napi::Env env, ModelWrap* owner, std::function<int32_t(rs_error*)> run, std::function<Napi::Value(Napi::Env)> done);
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    rs_error e{};
    status_ = run_(&e);
    if (status_ != RS_OK) SetError(e.message[0] ? e.message : "kernels backend error " + std::to_string(status_));
  }
  void OnOK() override;
  void OnError(const Napi::Error& err) override;

 private:
  Napi::Promise::Deferred deferred_;
  ModelWrap* owner_;
  std::function<int32_t(rs_error*)> run_;
  std::function<Napi::Value(Napi::Env)> done_;
  int32_t status_ = RS_OK;
};

template <typename T>
Napi::TypedArrayOf<T> make_array(Napi::Env env, const std::vector<T>& v) {
  auto a = Napi::TypedArrayOf<T>::New(env, v.size());
  if (!v.empty()) std::memcpy(a.Data(), v.data(), v.size() * sizeof(T));
  return a;
}

template <typename T>
std::vector<T> copy_of(const Arr<T>& a) {
  return a ? std::vector<T>(a.data, a.data + a.len) : std::vector<T>();
}

class ModelWrap : public Napi::ObjectWrap<ModelWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "KernelsModel",
                       {InstanceMethod("numParams", &ModelWrap::NumParams), InstanceMethod("threads", &ModelWrap::Threads),
                        InstanceMethod("setThreads", &ModelWrap::SetThreads),
                        InstanceMethod("tensors", &ModelWrap::Tensors), InstanceMethod("read", &ModelWrap::Read),
                        InstanceMethod("write", &ModelWrap::Write),
                        InstanceMethod("ranges", &ModelWrap::Ranges), InstanceMethod("stepCount", &ModelWrap::StepCount),
                        InstanceMethod("setStepCount", &ModelWrap::SetStepCount), InstanceMethod("zeroGrad", &ModelWrap::ZeroGrad),
                        InstanceMethod("setLora", &ModelWrap::SetLora), InstanceMethod("loraGrads", &ModelWrap::LoraGrads),
                        InstanceMethod("forward", &ModelWrap::Forward), InstanceMethod("trainMicro", &ModelWrap::TrainMicro),
                        InstanceMethod("step", &ModelWrap::Step), InstanceMethod("generate", &ModelWrap::Generate),
                        InstanceMethod("shardOptimizer", &ModelWrap::ShardOptimizer),
                        InstanceMethod("optimizerShard", &ModelWrap::OptimizerShard), InstanceMethod("shardStep", &ModelWrap::ShardStep),
                        InstanceMethod("reduceScatterGrads", &ModelWrap::ReduceScatterGrads),
                        InstanceMethod("allGatherParams", &ModelWrap::AllGatherParams),
                        InstanceMethod("ncclReduceScatterGrads", &ModelWrap::NcclReduceScatterGrads),
                        InstanceMethod("ncclAllGatherParams", &ModelWrap::NcclAllGatherParams),
                        InstanceMethod("createEngine", &ModelWrap::CreateEngine),
                        InstanceMethod("dispose", &ModelWrap::Dispose)});
  }

  ModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelWrap>(info) {
    if (info.Length() != 2 || !info[0].IsExternal() || !info[1].IsExternal())
      throw Napi::TypeError::New(info.Env(), "KernelsModel is created by backend.createModel()");
    be_ = info[0].As<Napi::External<Backend>>().Data();
    m_ = info[1].As<Napi::External<rs_model>>().Data();
  }
  ~ModelWrap() override {
    if (m_) be_->rs_model_free(m_);
  }

  void work_done() {
    busy_ = false;
    Unref();
  }

 private:
  rs_model* live(const Args& a) {
    if (!m_) throw Napi::Error::New(a.env(), "model has been disposed");
    if (busy_) throw Napi::Error::New(a.env(), "model is busy with another call (await it first)");
    return m_;
  }

  Napi::Value queue(Napi::Env env, std::function<int32_t(rs_error*)> run, std::function<Napi::Value(Napi::Env)> done) {
    auto* w = new ModelWork(env, this, std::move(run), std::move(done));
    busy_ = true;
    Ref();  // keep this wrapper (and the rs_model) alive until the work ends
    Napi::Promise p = w->Promise();
    w->Queue();
    return p;
  }

  Napi::Value NumParams(const Napi::CallbackInfo& info) {
    Args a(info, "numParams");
    return Napi::Number::New(info.Env(), (double)be_->rs_model_num_params(live(a)));
  }
  Napi::Value Threads(const Napi::CallbackInfo& info) {
    Args a(info, "threads");
    return Napi::Number::New(info.Env(), be_->rs_model_threads(live(a)));
  }
  Napi::Value SetThreads(const Napi::CallbackInfo& info) {
    Args a(info, "setThreads");
    rs_model* m = live(a);
    const int32_t n = (int32_t)a.int_in(a.num(0, "threads"), "threads", 0, 4096);
    rs_error e{};
    check_status(info.Env(), "setThreads", be_->rs_model_set_threads(m, n, &e), e);
    return info.Env().Undefined();
  }
  Napi::Value Tensors(const Napi::CallbackInfo& info) {
    Args a(info, "tensors");
    rs_model* m = live(a);
    const int32_t n = be_->rs_model_num_tensors(m);
    Napi::Array out = Napi::Array::New(info.Env(), n);
    for (int32_t i = 0; i < n; i++) {
      rs_tensor_info t{};
      rs_error e{};
      check_status(info.Env(), "tensors", be_->rs_model_tensor_info(m, i, &t, &e), e);
      Napi::Object o = Napi::Object::New(info.Env());
      o.Set("name", t.name);
      o.Set("offset", (double)t.offset);
      o.Set("size", (double)t.size);
      Napi::Array shape = Napi::Array::New(info.Env(), t.ndim);
      for (int d = 0; d < t.ndim; d++) shape.Set(d, (double)t.shape[d]);
      o.Set("shape", shape);
      o.Set("weightDecay", t.weight_decay != 0);
      out.Set(i, o);
    }
    return out;
  }

  float* buffer(rs_model* m, const Args& a, int kind) {
    switch (kind) {
      case 0: return be_->rs_model_params(m);
      case 1: return be_->rs_model_grads(m);
      case 2: return be_->rs_model_adam_m(m);
      case 3: return be_->rs_model_adam_v(m);
    }
    a.range_error("buffer kind must be 0 (params), 1 (grads), 2 (adam m) or 3 (adam v)");
  }
  // Floats in buffer `kind`: the moments hold this rank's ZeRO-1 slice only.
  int64_t length(rs_model* m, int kind) {
    if (kind < 2) return be_->rs_model_num_params(m);
    int64_t offset = 0, count = 0;
    be_->rs_model_optimizer_shard(m, &offset, &count);
    return count;
  }
  // read(kind, out: Float32Array[numParams, or the moments' slice]); write(kind, src: the same length)
  Napi::Value Read(const Napi::CallbackInfo& info) {
    Args a(info, "read");
    rs_model* m = live(a);
    const int kind = a.i32(0, "kind", 0, 3);
    const int64_t n = length(m, kind);
    float* src = buffer(m, a, kind);
    auto out = a.arr<float>(1, "out", (size_t)n);
    if ((int64_t)out.len != n) a.range_error("out has " + std::to_string(out.len) + " elements, the model has " + std::to_string(n));
    std::memcpy(out.data, src, sizeof(float) * (size_t)n);
    return info.Env().Undefined();
  }
  Napi::Value Write(const Napi::CallbackInfo& info) {
    Args a(info, "write");
    rs_model* m = live(a);
    const int kind = a.i32(0, "kind", 0, 3);
    const int64_t n = length(m, kind);
    float* dst = buffer(m, a, kind);
    auto src = a.arr<float>(1, "src", 0);
    if ((int64_t)src.len != n) a.range_error("src has " + std::to_string(src.len) + " elements, the model has " + std::to_string(n));
    std::memcpy(dst, src.data, sizeof(float) * (size_t)n);
    return info.Env().Undefined();
  }
  // ranges(kind, write: boolean, offsets: Float64Array, sizes: Float64Array, values: Float32Array): the ranges of
  // one buffer to or from values, back to back (rs_model_buffer_ranges).
  Napi::Value Ranges(const Napi::CallbackInfo& info) {
    Args a(info, "ranges");
    rs_model* m = live(a);
    const int32_t kind = a.i32(0, "kind", 0, 3);
    const bool write = info.Length() > 1 && info[1].ToBoolean().Value();
    auto off = a.arr<double>(2, "offsets", 0);
    auto size = a.arr<double>(3, "sizes", off.len);
    if (size.len != off.len) a.range_error("offsets and sizes differ in length");
    auto values = a.arr<float>(4, "values", 0);
    std::vector<int64_t> o(off.len), s(off.len);
    int64_t total = 0;
    for (size_t i = 0; i < off.len; i++) {
      o[i] = a.int_in(off.data[i], "offsets[i]", 0, (int64_t)1 << 52);
      s[i] = a.int_in(size.data[i], "sizes[i]", 0, (int64_t)1 << 52);
      total += s[i];
    }
    if ((int64_t)values.len != total) a.range_error("values has " + std::to_string(values.len) + " elements, the ranges hold " + std::to_string(total));
    rs_error e{};
    check_status(info.Env(), "ranges", be_->rs_model_buffer_ranges(m, kind, write ? 1 : 0, o.data(), s.data(), (int32_t)o.size(), values.data, &e), e);
    return info.Env().Undefined();
  }
  // setLora(rank, scale, dropout, seed, targets: Float64Array [weightOffset, a, b] per target, adapters: Float32Array):
  // the LoRA dropout of the following trainMicro calls (rs_model_set_lora).
  Napi::Value SetLora(const Napi::CallbackInfo& info) {
    Args a(info, "setLora");
    rs_model* m = live(a);
    auto tg = a.arr<double>(4, "targets", 0);
    auto adapters = a.arr<float>(5, "adapters", 0);
    if (tg.len % 3 != 0) a.range_error("targets holds [weightOffset, a, b] per target");
    std::vector<rs_lora_target> t(tg.len / 3);
    for (size_t i = 0; i < t.size(); i++)
      t[i] = {a.int_in(tg.data[3 * i], "weightOffset", 0, (int64_t)1 << 52), a.int_in(tg.data[3 * i + 1], "a", 0, (int64_t)1 << 52),
              a.int_in(tg.data[3 * i + 2], "b", 0, (int64_t)1 << 52)};
    rs_lora_spec spec{(int32_t)t.size(), a.i32(0, "rank", 1, 4096), (float)a.num(1, "scale"), (float)a.num(2, "dropout"),
                      (uint64_t)a.int_in(a.num(3, "seed"), "seed", 0, (int64_t)1 << 53), t.data(), adapters.data, (int64_t)adapters.len};
    rs_error e{};
    check_status(info.Env(), "setLora", be_->rs_model_set_lora(m, &spec, &e), e);
    return info.Env().Undefined();
  }
  // loraGrads(out: Float32Array): the LoRA dropout correction's adapter gradient (rs_model_lora_grads).
  Napi::Value LoraGrads(const Napi::CallbackInfo& info) {
    Args a(info, "loraGrads");
    rs_model* m = live(a);
    auto out = a.arr<float>(0, "out", 0);
    rs_error e{};
    check_status(info.Env(), "loraGrads", be_->rs_model_lora_grads(m, out.data, (int64_t)out.len, &e), e);
    return info.Env().Undefined();
  }
  Napi::Value StepCount(const Napi::CallbackInfo& info) {
    Args a(info, "stepCount");
    return Napi::Number::New(info.Env(), (double)be_->rs_model_step_count(live(a)));
  }
  Napi::Value SetStepCount(const Napi::CallbackInfo& info) {
    Args a(info, "setStepCount");
    be_->rs_model_set_step_count(live(a), a.int_in(a.num(0, "step"), "step", 0, (int64_t)1 << 50));
    return info.Env().Undefined();
  }
  Napi::Value ZeroGrad(const Napi::CallbackInfo& info) {
    Args a(info, "zeroGrad");
    be_->rs_model_zero_grad(live(a));
    return info.Env().Undefined();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    Args a(info, "dispose");
    if (!m_) return info.Env().Undefined();
    if (busy_) throw Napi::Error::New(info.Env(), "dispose: model is busy with another call (await it first)");
    be_->rs_model_free(m_);
    m_ = nullptr;
    return info.Env().Undefined();
  }

  // forward(tokens: Int32Array, segStarts: Int32Array, segParents: Int32Array|null) -> Promise<Float32Array [T * V]>
  Napi::Value Forward(const Napi::CallbackInfo& info) {
    Args a(info, "forward");
    rs_model* m = live(a);
    auto tokens = std::make_shared<std::vector<int32_t>>(copy_of(a.arr<int32_t>(0, "tokens", 1)));
    auto segs = std::make_shared<std::vector<int32_t>>(copy_of(a.arr<int32_t>(1, "segmentStarts", 1)));
    auto parents = std::make_shared<std::vector<int32_t>>(copy_of(a.arr<int32_t>(2, "segmentParents", segs->size(), true)));
    if (tokens->size() > (size_t)kMax) a.range_error("too many tokens");
    // V from the tensor table: the embedding is tensor 0, shape [V, D].
    rs_tensor_info t0{};
    rs_error e0{};
    be_->rs_model_tensor_info(m, 0, &t0, &e0);
    auto logits = std::make_shared<std::vector<float>>();
    const size_t n_logits = tokens->size() * (size_t)t0.shape[0];
    Backend* be = be_;
    return queue(
        info.Env(),
        [be, m, tokens, segs, parents, logits, n_logits](rs_error* e) {
          try {
            logits->resize(n_logits);
          } catch (const std::bad_alloc&) {
            e->code = RS_ERR_OUT_OF_MEMORY;
            std::snprintf(e->message, sizeof(e->message), "forward: out of memory for %zu logits", n_logits);
            return (int32_t)RS_ERR_OUT_OF_MEMORY;
          }
          return be->rs_model_forward(m, tokens->data(), (int32_t)tokens->size(), segs->data(), (int32_t)segs->size(),
                                      parents->empty() ? nullptr : parents->data(), logits->data(), e);
        },
        [logits](Napi::Env env) -> Napi::Value { return make_array(env, *logits); });
  }

  // trainMicro(tokens, segStarts, segParents|null, lossMask: Uint8Array, advantages|null, samplerLogprobs|null, spec,
  //            wantTokenLogprobs)
  //   -> Promise<stats (+ tokenLogprobs)>
  Napi::Value TrainMicro(const Napi::CallbackInfo& info) {
    Args a(info, "trainMicro");
    rs_model* m = live(a);
    auto tokens = std::make_shared<std::vector<int32_t>>(copy_of(a.arr<int32_t>(0, "tokens", 1)));
    const size_t T = tokens->size();
    if (T > (size_t)kMax) a.range_error("too many tokens");
    auto segs = std::make_shared<std::vector<int32_t>>(copy_of(a.arr<int32_t>(1, "segmentStarts", 1)));
    auto parents = std::make_shared<std::vector<int32_t>>(copy_of(a.arr<int32_t>(2, "segmentParents", segs->size(), true)));
    auto mask = std::make_shared<std::vector<uint8_t>>(copy_of(a.arr<uint8_t>(3, "lossMask", T)));
    auto adv = std::make_shared<std::vector<float>>(copy_of(a.arr<float>(4, "advantages", T, true)));
    auto slp = std::make_shared<std::vector<float>>(copy_of(a.arr<float>(5, "samplerLogprobs", T, true)));
    const rs_loss_spec spec = read_loss_spec(a, a.obj(6, "spec"));
    const bool want_lp = a.flag(7, "wantTokenLogprobs");
    auto stats = std::make_shared<rs_loss_stats>();
    auto lp = std::make_shared<std::vector<float>>(want_lp ? T : 0);
    Backend* be = be_;
    return queue(
        info.Env(),
        [be, m, tokens, segs, parents, mask, adv, slp, spec, stats, lp, want_lp](rs_error* e) {
          return be->rs_model_train_micro(m, tokens->data(), (int32_t)tokens->size(), segs->data(), (int32_t)segs->size(),
                                          parents->empty() ? nullptr : parents->data(), mask->data(),
                                          adv->empty() ? nullptr : adv->data(), slp->empty() ? nullptr : slp->data(), &spec, stats.get(),
                                          want_lp ? lp->data() : nullptr, e);
        },
        [stats, lp, want_lp](Napi::Env env) -> Napi::Value {
          Napi::Object o = loss_stats_object(env, *stats);
          if (want_lp) o.Set("tokenLogprobs", make_array(env, *lp));
          return o;
        });
  }

  static rs_optim_config optim_of(const Args& a, Napi::Object o) {
    rs_optim_config c{};
    c.lr = (float)field_num(a, o, "lr");
    c.beta1 = (float)field_num(a, o, "beta1");
    c.beta2 = (float)field_num(a, o, "beta2");
    c.eps = (float)field_num(a, o, "eps");
    c.weight_decay = (float)field_num(a, o, "weightDecay");
    c.max_grad_norm = (float)field_num(a, o, "maxGradNorm");
    return c;
  }
  static Napi::Value step_result(Napi::Env env, const rs_step_result& res) {
    Napi::Object r = Napi::Object::New(env);
    r.Set("gradNorm", res.grad_norm);
    r.Set("clipped", res.clipped != 0);
    r.Set("skipped", res.skipped != 0);
    r.Set("step", (double)res.step);
    return r;
  }

  // step({lr, beta1, beta2, eps, weightDecay, maxGradNorm}) -> Promise<{gradNorm, clipped, skipped, step}>
  Napi::Value Step(const Napi::CallbackInfo& info) {
    Args a(info, "step");
    rs_model* m = live(a);
    const rs_optim_config c = optim_of(a, a.obj(0, "options"));
    auto res = std::make_shared<rs_step_result>();
    Backend* be = be_;
    return queue(
        info.Env(), [be, m, c, res](rs_error* e) { return be->rs_model_step(m, &c, res.get(), e); },
        [res](Napi::Env env) -> Napi::Value { return step_result(env, *res); });
  }

  // ZeRO-1 (kernels/zero1.ts). shardOptimizer(offset, count): the moments of that flat slice only;
  // optimizerShard() -> {offset, count}; shardStep(options, gradNorm) -> Promise<step result> (rs_model_shard_step).
  Napi::Value ShardOptimizer(const Napi::CallbackInfo& info) {
    Args a(info, "shardOptimizer");
    rs_model* m = live(a);
    rs_error e{};
    check_status(info.Env(), "shardOptimizer",
                 be_->rs_model_shard_optimizer(m, a.int_in(a.num(0, "offset"), "offset", 0, (int64_t)1 << 52),
                                               a.int_in(a.num(1, "count"), "count", 0, (int64_t)1 << 52), &e),
                 e);
    return info.Env().Undefined();
  }
  Napi::Value OptimizerShard(const Napi::CallbackInfo& info) {
    Args a(info, "optimizerShard");
    int64_t offset = 0, count = 0;
    be_->rs_model_optimizer_shard(live(a), &offset, &count);
    Napi::Object r = Napi::Object::New(info.Env());
    r.Set("offset", (double)offset);
    r.Set("count", (double)count);
    return r;
  }
  Napi::Value ShardStep(const Napi::CallbackInfo& info) {
    Args a(info, "shardStep");
    rs_model* m = live(a);
    const rs_optim_config c = optim_of(a, a.obj(0, "options"));
    const double norm = a.num(1, "gradNorm");
    auto res = std::make_shared<rs_step_result>();
    Backend* be = be_;
    return queue(
        info.Env(), [be, m, c, norm, res](rs_error* e) { return be->rs_model_shard_step(m, &c, norm, res.get(), e); },
        [res](Napi::Env env) -> Napi::Value { return step_result(env, *res); });
  }
  // reduceScatterGrads(counts) -> this rank's slice's sum of squares; allGatherParams(counts): the MPI collectives of
  // a ZeRO-1 step on the model's own buffers (comm.cc), so no whole copy of either crosses into JS.
  Napi::Value ReduceScatterGrads(const Napi::CallbackInfo& info) {
    Args a(info, "reduceScatterGrads");
    rs_model* m = live(a);
    float* g = be_->rs_model_grads(m);
    if (!g) throw Napi::Error::New(info.Env(), "reduceScatterGrads: the model's gradient buffer could not be read");
    return Napi::Number::New(info.Env(), comm_reduce_scatter_in_place(info[0], g, (size_t)be_->rs_model_num_params(m)));
  }
  // ncclReduceScatterGrads(handle, counts) -> sum of squares; ncclAllGatherParams(handle, counts): the same ZeRO-1
  // collectives over NCCL on the model's device buffers (the CUDA backend; handle from backend.ncclInit).
  std::pair<void*, std::vector<int64_t>> nccl_args(const Args& a, const char* what) {
    if (!be_->nccl.available) throw Napi::Error::New(a.env(), std::string(what) + ": this backend has no NCCL path");
    void* comm = nccl_handle_get(a.i32(0, "handle", 0, 1 << 20));
    if (!comm) a.range_error("no NCCL communicator with this handle");
    auto c = a.arr<double>(1, "counts", 0);
    std::vector<int64_t> counts(c.len);
    for (size_t i = 0; i < c.len; i++) counts[i] = a.int_in(c.data[i], "counts[i]", 0, (int64_t)1 << 52);
    return {comm, counts};
  }
  Napi::Value NcclReduceScatterGrads(const Napi::CallbackInfo& info) {
    Args a(info, "ncclReduceScatterGrads");
    rs_model* m = live(a);
    auto [comm, counts] = nccl_args(a, "ncclReduceScatterGrads");
    double sumsq = 0;
    if (be_->nccl.model_reduce_scatter_grads(comm, m, counts.data(), (int32_t)counts.size(), a.i32(2, "rank", 0, (int32_t)counts.size() - 1), &sumsq))
      throw Napi::Error::New(info.Env(), std::string("nccl: ") + be_->nccl.last_error());
    return Napi::Number::New(info.Env(), sumsq);
  }
  Napi::Value NcclAllGatherParams(const Napi::CallbackInfo& info) {
    Args a(info, "ncclAllGatherParams");
    rs_model* m = live(a);
    auto [comm, counts] = nccl_args(a, "ncclAllGatherParams");
    if (be_->nccl.model_all_gather_params(comm, m, counts.data(), (int32_t)counts.size()))
      throw Napi::Error::New(info.Env(), std::string("nccl: ") + be_->nccl.last_error());
    return info.Env().Undefined();
  }
  Napi::Value AllGatherParams(const Napi::CallbackInfo& info) {
    Args a(info, "allGatherParams");
    rs_model* m = live(a);
    float* p = be_->rs_model_params(m);
    if (!p) throw Napi::Error::New(info.Env(), "allGatherParams: the model's parameters could not be read");
    comm_all_gather_in_place(info[0], p, (size_t)be_->rs_model_num_params(m));
    return info.Env().Undefined();
  }

  // generate(flat: Int32Array, offsets: Float64Array[n+1], seeds: BigUint64Array|null, cfg) -> Promise<outputs>
  // cfg: {maxNewTokens, temperature, topP, topK, seed: bigint, eos: Int32Array, stopFlat: Int32Array,
  //       stopOffsets: Int32Array, returnLogits: boolean, vocabLimit: number}
  Napi::Value Generate(const Napi::CallbackInfo& info) {
    Args a(info, "generate");
    rs_model* m = live(a);
    auto flat = std::make_shared<std::vector<int32_t>>(copy_of(a.arr<int32_t>(0, "prompts", 0)));
    auto offd = a.arr<double>(1, "offsets", 2);
    const size_t n = offd.len - 1;
    if (n > (size_t)kMax) a.range_error("too many prompts");
    auto off = std::make_shared<std::vector<int64_t>>(offd.len);
    for (size_t i = 0; i < offd.len; i++) {
      (*off)[i] = a.int_in(offd.data[i], "offsets[i]", 0, (int64_t)flat->size());
      if (i > 0 && (*off)[i] < (*off)[i - 1]) a.range_error("offsets must be non-decreasing");
    }
    if ((*off)[n] != (int64_t)flat->size()) a.range_error("the last offset must equal the number of prompt tokens");
    auto seeds = std::make_shared<std::vector<uint64_t>>(copy_of(a.arr<uint64_t>(2, "seeds", n, true)));
    Napi::Object c = a.obj(3, "config");
    auto cfg = std::make_shared<rs_generate_config>();
    cfg->max_new_tokens = (int32_t)a.int_in(field_num(a, c, "maxNewTokens"), "maxNewTokens", 0, 1 << 24);
    cfg->temperature = (float)field_num(a, c, "temperature");
    cfg->top_p = (float)field_num(a, c, "topP");
    cfg->top_k = (int32_t)a.int_in(field_num(a, c, "topK"), "topK", 0, kMax);
    Napi::Value sv = c.Get("seed");
    if (!sv.IsBigInt()) a.type_error("seed must be a bigint");
    bool lossless = true;
    cfg->seed = sv.As<Napi::BigInt>().Uint64Value(&lossless);
    cfg->return_logits = field_bool(a, c, "returnLogits") ? 1 : 0;
    cfg->vocab_limit = (int32_t)a.int_in(field_num(a, c, "vocabLimit"), "vocabLimit", 0, kMax);
    auto read_i32 = [&](const char* key) {
      Napi::Value v = c.Get(key);
      if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) a.type_error(std::string(key) + " must be an Int32Array");
      auto t = v.As<Napi::Int32Array>();
      return std::vector<int32_t>(t.Data(), t.Data() + t.ElementLength());
    };
    auto eos = std::make_shared<std::vector<int32_t>>(read_i32("eos"));
    auto stop_flat = std::make_shared<std::vector<int32_t>>(read_i32("stopFlat"));
    auto stop_off = std::make_shared<std::vector<int32_t>>(read_i32("stopOffsets"));
    if (stop_off->empty() || stop_off->front() != 0 || stop_off->back() != (int32_t)stop_flat->size())
      a.range_error("stopOffsets must start at 0 and end at stopFlat.length");
    for (size_t j = 1; j < stop_off->size(); j++)
      if ((*stop_off)[j] < (*stop_off)[j - 1]) a.range_error("stopOffsets must be non-decreasing");
    cfg->eos_ids = eos->data();
    cfg->n_eos = (int32_t)eos->size();
    cfg->stop_flat = stop_flat->data();
    cfg->stop_offsets = stop_off->data();
    cfg->n_stop = (int32_t)stop_off->size() - 1;

    rs_tensor_info t0{};
    rs_error e0{};
    be_->rs_model_tensor_info(m, 0, &t0, &e0);
    const size_t V = (size_t)t0.shape[0], slots = n * (size_t)cfg->max_new_tokens;
    struct Out {
      std::vector<int32_t> tokens, lengths, reasons;
      std::vector<float> lp, plp, logits;
    };
    auto out = std::make_shared<Out>();
    Backend* be = be_;
    const size_t n_prompts = n;
    return queue(
        info.Env(),
        [be, m, flat, off, seeds, cfg, eos, stop_flat, stop_off, out, slots, V, n_prompts](rs_error* e) {
          try {
            out->tokens.assign(slots, 0);
            out->lp.assign(slots, 0.f);
            out->plp.assign(slots, 0.f);
            out->lengths.assign(n_prompts, 0);
            out->reasons.assign(n_prompts, 0);
            if (cfg->return_logits) out->logits.assign(slots * V, 0.f);
          } catch (const std::bad_alloc&) {
            e->code = RS_ERR_OUT_OF_MEMORY;
            std::snprintf(e->message, sizeof(e->message), "generate: out of memory for the outputs");
            return (int32_t)RS_ERR_OUT_OF_MEMORY;
          }
          rs_generate_output o{out->tokens.data(), out->lp.data(), out->plp.data(), out->lengths.data(), out->reasons.data(),
                               cfg->return_logits ? out->logits.data() : nullptr};
          return be->rs_model_generate(m, flat->empty() ? nullptr : flat->data(), off->data(), (int32_t)n_prompts,
                                       seeds->empty() ? nullptr : seeds->data(), cfg.get(), &o, e);
        },
        [out](Napi::Env env) -> Napi::Value {
          Napi::Object r = Napi::Object::New(env);
          r.Set("tokens", make_array(env, out->tokens));
          r.Set("logprobs", make_array(env, out->lp));
          r.Set("policyLogprobs", make_array(env, out->plp));
          r.Set("lengths", make_array(env, out->lengths));
          r.Set("stopReasons", make_array(env, out->reasons));
          if (!out->logits.empty()) r.Set("stepLogits", make_array(env, out->logits));
          return r;
        });
  }

  // createEngine(config) -> KernelsEngine over this model (engine_api.cc)
  Napi::Value CreateEngine(const Napi::CallbackInfo& info) {
    Args a(info, "createEngine");
    rs_model* m = live(a);
    rs_tensor_info t0{};
    rs_error e0{};
    be_->rs_model_tensor_info(m, 0, &t0, &e0);
    return create_engine(EngineInit{be_, &m_, &busy_, 0, (int)t0.shape[0]}, info.This().As<Napi::Object>(), info);
  }

  Backend* be_ = nullptr;
  rs_model* m_ = nullptr;
  bool busy_ = false;
};

ModelWork::ModelWork(Napi::Env env, ModelWrap* owner, std::function<int32_t(rs_error*)> run, std::function<Napi::Value(Napi::Env)> done)
    : Napi::AsyncWorker(env, "rollstream:model"), deferred_(Napi::Promise::Deferred::New(env)), owner_(owner), run_(std::move(run)),
      done_(std::move(done)) {}

void ModelWork::OnOK() {
  owner_->work_done();
  try {
    deferred_.Resolve(done_(Env()));
  } catch (const Napi::Error& e) {
    deferred_.Reject(e.Value());
  }
}

void ModelWork::OnError(const Napi::Error& err) {
  owner_->work_done();
  // The status tells a caller whether its input was refused (RS_ERR_INVALID_ARGUMENT) or the backend
  // failed (out of memory, internal): the learner sets a refused batch aside but never a failing device.
  Napi::Object e = err.Value();
  e.Set("rsStatus", Napi::Number::New(Env(), status_));
  deferred_.Reject(e);
}

}  // namespace

Napi::Function define_model_class(Napi::Env env) { return ModelWrap::Define(env); }

// createModel(config, seed: bigint) -> KernelsModel
Napi::Value create_model(Backend* be, const Napi::CallbackInfo& info) {
  Args a(info, "createModel");
  Napi::Object o = a.obj(0, "config");
  auto int_field = [&](const char* key, int64_t lo) { return (int32_t)a.int_in(field_num(a, o, key), key, lo, kMax); };
  rs_model_config c{};
  c.vocab_size = int_field("vocabSize", 1);
  c.hidden_size = int_field("hiddenSize", 1);
  c.intermediate_size = int_field("intermediateSize", 1);
  c.num_layers = int_field("numLayers", 1);
  c.num_heads = int_field("numHeads", 1);
  c.num_kv_heads = int_field("numKvHeads", 1);
  c.max_position_embeddings = int_field("maxPositionEmbeddings", 1);
  c.threads = int_field("threads", 0);
  c.rms_norm_eps = (float)field_num(a, o, "rmsNormEps");
  c.rope_theta = field_num(a, o, "ropeTheta");
  c.tie_word_embeddings = field_bool(a, o, "tieWordEmbeddings") ? 1 : 0;
  c.attention_bias = field_bool(a, o, "attentionBias") ? 1 : 0;
  // Qwen3 fields: optional in ModelConfig (absent = hidden/heads, no q/k norm).
  c.head_dim = o.Get("headDim").IsUndefined() ? 0 : int_field("headDim", 1);
  c.qk_norm = !o.Get("qkNorm").IsUndefined() && field_bool(a, o, "qkNorm") ? 1 : 0;
  c.rotary_dim = o.Get("rotaryDim").IsUndefined() ? 0 : int_field("rotaryDim", 1);
  // MoE: optional; the per-layer flags come computed (moeLayerFlags in kernels/model-config.ts).
  std::vector<uint8_t> moe_layers;
  Napi::Value mv = o.Get("moe");
  if (!mv.IsUndefined() && !mv.IsNull()) {
    if (!mv.IsObject()) a.type_error("moe must be an object");
    Napi::Object mo = mv.As<Napi::Object>();
    auto moe_int = [&](const char* key) { return (int32_t)a.int_in(field_num(a, mo, key), key, 1, kMax); };
    c.num_experts = moe_int("numExperts");
    c.num_experts_per_tok = moe_int("numExpertsPerTok");
    c.moe_intermediate_size = moe_int("moeIntermediateSize");
    c.norm_topk_prob = field_bool(a, mo, "normTopkProb") ? 1 : 0;
    c.router_aux_loss_coef = (float)field_num(a, mo, "routerAuxLossCoef");
    if (!mo.Get("nSharedExperts").IsUndefined()) c.n_shared_experts = (int32_t)a.int_in(field_num(a, mo, "nSharedExperts"), "nSharedExperts", 0, kMax);
    Napi::Value sv = mo.Get("sigmoid");
    if (!sv.IsUndefined()) {
      if (!sv.IsObject()) a.type_error("moe.sigmoid must be an object");
      Napi::Object so = sv.As<Napi::Object>();
      c.moe_router = 1;
      c.n_group = (int32_t)a.int_in(field_num(a, so, "nGroup"), "nGroup", 1, kMax);
      c.topk_group = (int32_t)a.int_in(field_num(a, so, "topkGroup"), "topkGroup", 1, kMax);
      c.routed_scaling_factor = (float)field_num(a, so, "routedScalingFactor");
    }
    Napi::Value lv = o.Get("moeLayers");
    if (!lv.IsTypedArray() || lv.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) a.type_error("moeLayers must be a Uint8Array");
    Napi::Uint8Array flags = lv.As<Napi::Uint8Array>();
    if ((int64_t)flags.ElementLength() != c.num_layers) a.type_error("moeLayers must hold one flag per layer");
    moe_layers.assign(flags.Data(), flags.Data() + flags.ElementLength());
    c.moe_layers = moe_layers.data();
  }
  if (a.size() < 2 || !a[1].IsBigInt()) a.type_error("seed must be a bigint");
  bool lossless = true;
  const uint64_t seed = a[1].As<Napi::BigInt>().Uint64Value(&lossless);
  rs_error e{};
  rs_model* m = be->rs_model_create(&c, seed, &e);
  if (!m) throw Napi::Error::New(info.Env(), e.message[0] ? e.message : "model creation failed");
  auto* data = info.Env().GetInstanceData<AddonData>();
  return data->model_ctor.New({Napi::External<Backend>::New(info.Env(), be), Napi::External<rs_model>::New(info.Env(), m)});
}
