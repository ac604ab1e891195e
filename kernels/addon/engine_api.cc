// The JS class around rs_engine* (kernels.h, step-level generation). An engine runs its model: it holds the model's
// JS object (so the model outlives it) and shares the model's busy flag, so a step and any model call never run at
// once. add / cancel / setVersion / stats are quick and synchronous; step runs on a libuv thread and returns a
// Promise whose outputs are created when it ends.
#include <memory>
#include <vector>

#include "api.h"
#include "args.h"

namespace {

constexpr int64_t kMax = std::numeric_limits<int32_t>::max();

template <typename T>
Napi::TypedArrayOf<T> typed(Napi::Env env, const std::vector<T>& v) {
  auto a = Napi::TypedArrayOf<T>::New(env, v.size());
  if (!v.empty()) std::memcpy(a.Data(), v.data(), v.size() * sizeof(T));
  return a;
}

std::vector<int32_t> i32_field(const Args& a, Napi::Object o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) a.type_error(std::string(key) + " must be an Int32Array");
  auto t = v.As<Napi::Int32Array>();
  return std::vector<int32_t>(t.Data(), t.Data() + t.ElementLength());
}

uint64_t bigint_field(const Args& a, Napi::Object o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsBigInt()) a.type_error(std::string(key) + " must be a bigint");
  bool lossless = true;
  return v.As<Napi::BigInt>().Uint64Value(&lossless);
}

// What one step returns, filled on the worker thread.
struct StepOut {
  std::vector<rs_engine_token> toks;
  std::vector<rs_engine_finish> fin;
  std::vector<float> logits;
  rs_engine_step_output o{};
};

Napi::Object step_object(Napi::Env env, const StepOut& s, int V) {
  const int n = s.o.n_tokens, f = s.o.n_finished;
  std::vector<double> ids(n), versions(n), fids(f);
  std::vector<int32_t> index(n), tokens(n), reasons(f), counts(f);
  std::vector<float> lp(n), plp(n);
  for (int i = 0; i < n; i++) {
    const rs_engine_token& t = s.toks[i];
    ids[i] = (double)t.seq_id;
    versions[i] = (double)t.version;
    index[i] = t.index;
    tokens[i] = t.token;
    lp[i] = t.logprob;
    plp[i] = t.policy_logprob;
  }
  for (int i = 0; i < f; i++) {
    fids[i] = (double)s.fin[i].seq_id;
    reasons[i] = s.fin[i].stop_reason;
    counts[i] = s.fin[i].n_tokens;
  }
  Napi::Object r = Napi::Object::New(env);
  r.Set("seqIds", typed(env, ids));
  r.Set("index", typed(env, index));
  r.Set("tokens", typed(env, tokens));
  r.Set("logprobs", typed(env, lp));
  r.Set("policyLogprobs", typed(env, plp));
  r.Set("versions", typed(env, versions));
  r.Set("finishedIds", typed(env, fids));
  r.Set("stopReasons", typed(env, reasons));
  r.Set("finishedTokens", typed(env, counts));
  r.Set("prefillRows", s.o.prefill_rows);
  r.Set("decodeRows", s.o.decode_rows);
  if (!s.logits.empty()) r.Set("logits", typed(env, std::vector<float>(s.logits.begin(), s.logits.begin() + (size_t)n * V)));
  return r;
}

class EngineWrap;

class StepWork : public Napi::AsyncWorker {
 public:
  StepWork(Napi::Env env, EngineWrap* owner, std::shared_ptr<StepOut> out, int V);
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override;
  void OnOK() override;
  void OnError(const Napi::Error& err) override;

 private:
  Napi::Promise::Deferred deferred_;
  EngineWrap* owner_;
  std::shared_ptr<StepOut> out_;
  int V_;
  int32_t status_ = RS_OK;
};

class EngineWrap : public Napi::ObjectWrap<EngineWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "KernelsEngine",
                       {InstanceMethod("add", &EngineWrap::Add), InstanceMethod("step", &EngineWrap::Step),
                        InstanceMethod("cancel", &EngineWrap::Cancel), InstanceMethod("setVersion", &EngineWrap::SetVersion),
                        InstanceMethod("stats", &EngineWrap::Stats), InstanceMethod("dispose", &EngineWrap::Dispose)});
  }

  EngineWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EngineWrap>(info) {
    if (info.Length() != 2 || !info[0].IsExternal() || !info[1].IsExternal())
      throw Napi::TypeError::New(info.Env(), "KernelsEngine is created by model.createEngine()");
    auto* init = info[0].As<Napi::External<EngineInit>>().Data();
    be_ = init->be;
    model_ = init->model;
    model_busy_ = init->model_busy;
    max_seqs_ = init->max_seqs;
    V_ = init->vocab;
    e_ = info[1].As<Napi::External<rs_engine>>().Data();
  }
  ~EngineWrap() override {
    if (e_) be_->rs_engine_free(e_);
  }

  void keep_model(Napi::Object model) { model_ref_ = Napi::Persistent(model); }
  rs_engine* engine() const { return e_; }
  Backend* backend() const { return be_; }
  int max_seqs() const { return max_seqs_; }
  void work_done() {
    busy_ = false;
    *model_busy_ = false;
    Unref();
  }

 private:
  // add / cancel / setVersion touch only the engine's bookkeeping: they wait for a step, not for a model call.
  rs_engine* live(const Args& a, bool runs_model = false) {
    if (!e_) throw Napi::Error::New(a.env(), "engine has been disposed");
    if (!*model_) throw Napi::Error::New(a.env(), "the engine's model has been disposed");
    if (busy_) throw Napi::Error::New(a.env(), "engine is busy with a step (await it first)");
    if (runs_model && *model_busy_) throw Napi::Error::New(a.env(), "the engine's model is busy with another call (await it first)");
    return e_;
  }

  // add(prompt: Int32Array, seeds: BigUint64Array, params) -> Float64Array of sequence ids
  // params: {maxNewTokens, temperature, topP, topK, vocabLimit, eos: Int32Array, stopFlat, stopOffsets, cacheSalt: bigint}
  Napi::Value Add(const Napi::CallbackInfo& info) {
    Args a(info, "engine.add");
    rs_engine* e = live(a);
    auto prompt = a.arr<int32_t>(0, "prompt", 1);
    auto seeds = a.arr<uint64_t>(1, "seeds", 1);
    Napi::Object p = a.obj(2, "params");
    const std::vector<int32_t> eos = i32_field(a, p, "eos"), stop_flat = i32_field(a, p, "stopFlat"), stop_off = i32_field(a, p, "stopOffsets");
    if (stop_off.empty() || stop_off.front() != 0 || stop_off.back() != (int32_t)stop_flat.size())
      a.range_error("stopOffsets must start at 0 and end at stopFlat.length");
    if (prompt.len > (size_t)kMax || seeds.len > (size_t)kMax) a.range_error("too many tokens or seeds");
    rs_engine_request r{};
    r.prompt = prompt.data;
    r.n_prompt = (int32_t)prompt.len;
    r.n_samples = (int32_t)seeds.len;
    r.seeds = seeds.data;
    r.max_new_tokens = (int32_t)a.int_in(field_num(a, p, "maxNewTokens"), "maxNewTokens", 0, 1 << 24);
    r.temperature = (float)field_num(a, p, "temperature");
    r.top_p = (float)field_num(a, p, "topP");
    r.top_k = (int32_t)a.int_in(field_num(a, p, "topK"), "topK", 0, kMax);
    r.vocab_limit = (int32_t)a.int_in(field_num(a, p, "vocabLimit"), "vocabLimit", 0, kMax);
    r.eos_ids = eos.data();
    r.n_eos = (int32_t)eos.size();
    r.stop_flat = stop_flat.data();
    r.stop_offsets = stop_off.data();
    r.n_stop = (int32_t)stop_off.size() - 1;
    r.cache_salt = bigint_field(a, p, "cacheSalt");
    std::vector<int64_t> ids(seeds.len);
    rs_error err{};
    check_status(info.Env(), "engine.add", be_->rs_engine_add(e, &r, ids.data(), &err), err);
    return typed(info.Env(), std::vector<double>(ids.begin(), ids.end()));
  }

  // step(returnLogits: boolean) -> Promise<step object>
  Napi::Value Step(const Napi::CallbackInfo& info) {
    Args a(info, "engine.step");
    live(a, true);
    const bool want_logits = a.flag(0, "returnLogits");
    auto out = std::make_shared<StepOut>();
    out->toks.resize(max_seqs_);
    out->fin.resize(max_seqs_);
    if (want_logits) out->logits.resize((size_t)max_seqs_ * V_);
    out->o = rs_engine_step_output{out->toks.data(), max_seqs_, 0, out->fin.data(), max_seqs_, 0, want_logits ? out->logits.data() : nullptr, 0, 0};
    auto* w = new StepWork(info.Env(), this, out, V_);
    busy_ = true;
    *model_busy_ = true;
    Ref();
    Napi::Promise pr = w->Promise();
    w->Queue();
    return pr;
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    Args a(info, "engine.cancel");
    rs_engine* e = live(a);
    rs_error err{};
    check_status(info.Env(), "engine.cancel", be_->rs_engine_cancel(e, (int64_t)a.int_in(a.num(0, "seqId"), "seqId", 1, (int64_t)1 << 52), &err), err);
    return info.Env().Undefined();
  }

  // setVersion(version: number, mode: 0 keep | 1 recompute)
  Napi::Value SetVersion(const Napi::CallbackInfo& info) {
    Args a(info, "engine.setVersion");
    rs_engine* e = live(a);
    const int64_t v = a.int_in(a.num(0, "version"), "version", -((int64_t)1 << 52), (int64_t)1 << 52);
    rs_error err{};
    check_status(info.Env(), "engine.setVersion", be_->rs_engine_set_version(e, v, a.i32(1, "mode", 0, 1), &err), err);
    return info.Env().Undefined();
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Args a(info, "engine.stats");
    if (!e_) throw Napi::Error::New(a.env(), "engine has been disposed");
    rs_engine_stats s{};
    rs_error err{};
    check_status(info.Env(), "engine.stats", be_->rs_engine_get_stats(e_, &s, &err), err);
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("version", (double)s.version);
    o.Set("blocksTotal", s.blocks_total);
    o.Set("blocksUsed", s.blocks_used);
    o.Set("blocksCachedIdle", s.blocks_cached_idle);
    o.Set("blocksFree", s.blocks_free);
    o.Set("running", s.running);
    o.Set("waiting", s.waiting);
    o.Set("steps", (double)s.steps);
    o.Set("prefillRows", (double)s.prefill_rows);
    o.Set("decodeRows", (double)s.decode_rows);
    o.Set("promptTokens", (double)s.prompt_tokens);
    o.Set("prefixHitTokens", (double)s.prefix_hit_tokens);
    o.Set("sharedPromptTokens", (double)s.shared_prompt_tokens);
    o.Set("preemptions", (double)s.preemptions);
    o.Set("cowCopies", (double)s.cow_copies);
    o.Set("tokensGenerated", (double)s.tokens_generated);
    return o;
  }

  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (!e_) return info.Env().Undefined();
    if (busy_) throw Napi::Error::New(info.Env(), "engine.dispose: a step is still running (await it first)");
    be_->rs_engine_free(e_);
    e_ = nullptr;
    model_ref_.Reset();
    return info.Env().Undefined();
  }

  Backend* be_ = nullptr;
  rs_engine* e_ = nullptr;
  rs_model* const* model_ = nullptr;
  bool* model_busy_ = nullptr;
  int max_seqs_ = 0, V_ = 0;
  bool busy_ = false;
  Napi::ObjectReference model_ref_;
};

StepWork::StepWork(Napi::Env env, EngineWrap* owner, std::shared_ptr<StepOut> out, int V)
    : Napi::AsyncWorker(env, "rollstream:engine"), deferred_(Napi::Promise::Deferred::New(env)), owner_(owner), out_(std::move(out)), V_(V) {}

void StepWork::Execute() {
  rs_error e{};
  status_ = owner_->engine() ? 0 : RS_ERR_INVALID_ARGUMENT;
  if (status_ == RS_OK) status_ = owner_->backend()->rs_engine_step(owner_->engine(), &out_->o, &e);
  if (status_ != RS_OK) SetError(e.message[0] ? e.message : "engine step failed with status " + std::to_string(status_));
}

void StepWork::OnOK() {
  owner_->work_done();
  deferred_.Resolve(step_object(Env(), *out_, V_));
}

void StepWork::OnError(const Napi::Error& err) {
  owner_->work_done();
  Napi::Object e = err.Value();
  e.Set("rsStatus", Napi::Number::New(Env(), status_));
  deferred_.Reject(e);
}

}  // namespace

Napi::Function define_engine_class(Napi::Env env) { return EngineWrap::Define(env); }

// model.createEngine(config) -> KernelsEngine. config: {blockSize, nBlocks, maxSeqs, maxPrefillTokens, cacheAcrossVersions}
Napi::Value create_engine(const EngineInit& init, Napi::Object model, const Napi::CallbackInfo& info) {
  Args a(info, "createEngine");
  Napi::Object o = a.obj(0, "config");
  rs_engine_config c{};
  c.block_size = (int32_t)a.int_in(field_num(a, o, "blockSize"), "blockSize", 0, 1024);
  c.n_blocks = (int32_t)a.int_in(field_num(a, o, "nBlocks"), "nBlocks", 1, 1 << 24);
  c.max_seqs = (int32_t)a.int_in(field_num(a, o, "maxSeqs"), "maxSeqs", 0, 1 << 20);
  c.max_prefill_tokens = (int32_t)a.int_in(field_num(a, o, "maxPrefillTokens"), "maxPrefillTokens", 0, 1 << 24);
  c.cache_across_versions = field_bool(a, o, "cacheAcrossVersions") ? 1 : 0;
  rs_error e{};
  rs_engine* eng = init.be->rs_engine_create(*init.model, &c, &e);
  if (!eng) {
    Napi::Error err = Napi::Error::New(info.Env(), e.message[0] ? e.message : "engine creation failed");
    err.Set("rsStatus", Napi::Number::New(info.Env(), e.code));
    throw err;
  }
  EngineInit full = init;
  full.max_seqs = c.max_seqs ? c.max_seqs : 256;
  auto* data = info.Env().GetInstanceData<AddonData>();
  Napi::Object obj = data->engine_ctor.New({Napi::External<EngineInit>::New(info.Env(), &full), Napi::External<rs_engine>::New(info.Env(), eng)});
  EngineWrap::Unwrap(obj)->keep_model(model);
  return obj;
}
