// N-API entry: openBackend(path) dlopen()s a kernels backend and returns an object whose methods call it.
#include <napi.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "api.h"
#include "args.h"

namespace {

// Index = the C enum's value (kernels.h: rs_blas_mode, rs_settings.simd_level, rs_cuda_matmul).
const std::vector<const char*> kBlasModes = {"auto", "off", "on"};
const std::vector<const char*> kSimdLevels = {"best", "avx2"};
const std::vector<const char*> kMatmulModes = {"default", "fp32", "tf32", "bf16"};

int32_t field_enum(const Args& a, Napi::Object o, const char* key, const std::vector<const char*>& names) {
  Napi::Value v = o.Get(key);
  if (v.IsString()) {
    const std::string got = v.As<Napi::String>().Utf8Value();
    for (size_t i = 0; i < names.size(); i++)
      if (got == names[i]) return (int32_t)i;
  }
  std::string want;
  for (const char* n : names) want += (want.empty() ? "\"" : ", \"") + std::string(n) + "\"";
  a.type_error(std::string(key) + " must be one of " + want);
}

class BackendWrap : public Napi::ObjectWrap<BackendWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    std::vector<Napi::ClassPropertyDescriptor<BackendWrap>> props = {
        InstanceMethod("info", &BackendWrap::Info),
        InstanceMethod("path", &BackendWrap::Path),
        InstanceMethod("deviceCount", &BackendWrap::DeviceCount),
        InstanceMethod("setThreads", &BackendWrap::SetThreads),
        InstanceMethod("setSettings", &BackendWrap::SetSettings),
        InstanceMethod("settings", &BackendWrap::GetSettings),
        InstanceMethod("setTestHooks", &BackendWrap::SetTestHooks),
        InstanceMethod("createModel", &BackendWrap::CreateModel),
        InstanceMethod("nccl", &BackendWrap::Nccl),
        InstanceMethod("ncclUniqueId", &BackendWrap::NcclUniqueId),
        InstanceMethod("ncclInit", &BackendWrap::NcclInit),
#define RS_KERNEL_PROP(name) InstanceMethod(#name, &BackendWrap::K_##name),
        RS_KERNEL_METHODS(RS_KERNEL_PROP)
#undef RS_KERNEL_PROP
    };
    return DefineClass(env, "KernelsBackend", props);
  }

  explicit BackendWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<BackendWrap>(info) {
    if (info.Length() != 1 || !info[0].IsExternal()) throw Napi::TypeError::New(info.Env(), "KernelsBackend is created by openBackend(path)");
    be_ = info[0].As<Napi::External<Backend>>().Data();
  }

 private:
  Napi::Value Info(const Napi::CallbackInfo& info) {
    // The CPU backend's line grows with the dispatcher's routing table; grow the buffer until it fits.
    for (size_t cap = 4096; cap <= (size_t(1) << 20); cap *= 4) {
      std::vector<char> buf(cap);
      if (be_->rs_backend_info(buf.data(), (int32_t)cap) == RS_OK) return Napi::String::New(info.Env(), buf.data());
    }
    throw Napi::Error::New(info.Env(), "backend info does not fit in 1 MiB");
  }
  Napi::Value Path(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), be_->path); }
  Napi::Value DeviceCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), be_->rs_device_count()); }
  Napi::Value SetThreads(const Napi::CallbackInfo& info) {
    Args a(info, "setThreads");
    be_->rs_set_num_threads(a.i32(0, "threads", 0, 4096));
    return info.Env().Undefined();
  }
  // KernelSettings (kernels/native.ts) <-> rs_settings: the names of the C enums as strings, every field required
  // (the TS side fills defaults); the library checks the rest (routes, a library changed after its first use).
  Napi::Value SetSettings(const Napi::CallbackInfo& info) {
    Args a(info, "setSettings");
    Napi::Object o = a.obj(0, "settings");
    const std::string blas_lib = field_str(a, o, "blasLib"), blas_routes = field_str(a, o, "blasRoutes"), cublas_lib = field_str(a, o, "cublasLib");
    rs_settings s{};
    s.blas_mode = field_enum(a, o, "blasMode", kBlasModes);
    s.blas_lib = blas_lib.c_str();
    s.blas_routes = blas_routes.c_str();
    s.simd_level = field_enum(a, o, "simd", kSimdLevels);
    s.cuda_matmul = field_enum(a, o, "cudaMatmul", kMatmulModes);
    s.cuda_sync = field_bool(a, o, "cudaSync") ? 1 : 0;
    s.cublas_lib = cublas_lib.c_str();
    rs_error e{};
    check_status(info.Env(), "setSettings", be_->rs_set_settings(&s, &e), e);
    return info.Env().Undefined();
  }
  Napi::Value GetSettings(const Napi::CallbackInfo& info) {
    rs_settings s{};
    be_->rs_get_settings(&s);
    Napi::Env env = info.Env();
    auto name = [](const std::vector<const char*>& names, int32_t v) { return v >= 0 && (size_t)v < names.size() ? names[(size_t)v] : "?"; };
    Napi::Object o = Napi::Object::New(env);
    o.Set("blasMode", Napi::String::New(env, name(kBlasModes, s.blas_mode)));
    o.Set("blasLib", Napi::String::New(env, s.blas_lib ? s.blas_lib : ""));
    o.Set("blasRoutes", Napi::String::New(env, s.blas_routes ? s.blas_routes : ""));
    o.Set("simd", Napi::String::New(env, name(kSimdLevels, s.simd_level)));
    o.Set("cudaMatmul", Napi::String::New(env, name(kMatmulModes, s.cuda_matmul)));
    o.Set("cudaSync", Napi::Boolean::New(env, s.cuda_sync != 0));
    o.Set("cublasLib", Napi::String::New(env, s.cublas_lib ? s.cublas_lib : ""));
    return o;
  }
  // Test only (kernels/testing.ts): {blasDetectedCore, slowdownOwn, slowdownBlas, corruptBlas}.
  Napi::Value SetTestHooks(const Napi::CallbackInfo& info) {
    Args a(info, "setTestHooks");
    Napi::Object o = a.obj(0, "hooks");
    const std::string core = field_str(a, o, "blasDetectedCore");
    rs_test_hooks h{};
    h.blas_detected_core = core.c_str();
    h.slowdown_own = (int32_t)a.int_in(field_num(a, o, "slowdownOwn"), "slowdownOwn", 0, 1 << 20);
    h.slowdown_blas = (int32_t)a.int_in(field_num(a, o, "slowdownBlas"), "slowdownBlas", 0, 1 << 20);
    h.corrupt_blas = field_bool(a, o, "corruptBlas") ? 1 : 0;
    rs_error e{};
    check_status(info.Env(), "setTestHooks", be_->rs_set_test_hooks(&h, &e), e);
    return info.Env().Undefined();
  }
  Napi::Value CreateModel(const Napi::CallbackInfo& info) { return create_model(be_, info); }

  // nccl() -> {available, describe}: whether this backend's learner ranks can use NCCL, and which (or why not).
  Napi::Value Nccl(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    const bool has = be_->nccl.available != nullptr;
    o.Set("available", Napi::Boolean::New(env, has && be_->nccl.available() == 1));
    o.Set("describe", Napi::String::New(env, has ? be_->nccl.describe() : "none (this backend has no NCCL path)"));
    return o;
  }
  const NcclFns& nccl_fns(const Napi::Env& env) {
    if (!be_->nccl.available) throw Napi::Error::New(env, "nccl: this backend has no NCCL path (the CUDA backend has)");
    return be_->nccl;
  }
  // ncclUniqueId() -> Uint8Array(128): rank 0's id for every rank's ncclInit.
  Napi::Value NcclUniqueId(const Napi::CallbackInfo& info) {
    const NcclFns& n = nccl_fns(info.Env());
    auto out = Napi::Uint8Array::New(info.Env(), 128);
    if (n.unique_id(out.Data())) throw Napi::Error::New(info.Env(), std::string("nccl: ") + n.last_error());
    return out;
  }
  // ncclInit(nranks, id: Uint8Array(128), rank, device) -> handle for the model's ncclReduceScatterGrads / ncclAllGatherParams.
  Napi::Value NcclInit(const Napi::CallbackInfo& info) {
    Args a(info, "ncclInit");
    const NcclFns& n = nccl_fns(info.Env());
    const int32_t nranks = a.i32(0, "nranks", 1, 1 << 20);
    auto id = a.arr<uint8_t>(1, "id", 128);
    if (id.len != 128) a.range_error("id must be the 128 bytes of ncclUniqueId");
    void* comm = nullptr;
    if (n.init(&comm, nranks, id.data, a.i32(2, "rank", 0, nranks - 1), a.i32(3, "device", 0, 1024)))
      throw Napi::Error::New(info.Env(), std::string("nccl: ") + n.last_error());
    return Napi::Number::New(info.Env(), nccl_handle_put(comm));
  }
#define RS_KERNEL_IMPL(name) \
  Napi::Value K_##name(const Napi::CallbackInfo& info) { return kernel_##name(be_, info); }
  RS_KERNEL_METHODS(RS_KERNEL_IMPL)
#undef RS_KERNEL_IMPL

  Backend* be_ = nullptr;
};

Napi::Value OpenBackend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "openBackend: path must be a string");
  Backend* be;
  try {
    be = open_backend(info[0].As<Napi::String>().Utf8Value());
  } catch (const std::runtime_error& e) {
    throw Napi::Error::New(env, e.what());
  }
  auto* data = env.GetInstanceData<AddonData>();
  return data->backend_ctor.New({Napi::External<Backend>::New(env, be)});
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  data->backend_ctor = Napi::Persistent(BackendWrap::Define(env));
  data->model_ctor = Napi::Persistent(define_model_class(env));
  data->engine_ctor = Napi::Persistent(define_engine_class(env));
  env.SetInstanceData(data);
  exports.Set("openBackend", Napi::Function::New(env, OpenBackend));
  exports.Set("abiVersion", Napi::Number::New(env, RS_ABI_VERSION));
  exports.Set("comm", comm_exports(env));
  return exports;
}

}  // namespace

NODE_API_MODULE(rollstream_kernels, Init)
