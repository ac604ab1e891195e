// N-API entry: openBackend(path) dlopen()s a kernels backend and returns an object whose methods call it.
#include <napi.h>

#include <stdexcept>
#include <vector>

#include "api.h"
#include "args.h"

namespace {

class BackendWrap : public Napi::ObjectWrap<BackendWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    std::vector<Napi::ClassPropertyDescriptor<BackendWrap>> props = {
        InstanceMethod("info", &BackendWrap::Info),
        InstanceMethod("path", &BackendWrap::Path),
        InstanceMethod("deviceCount", &BackendWrap::DeviceCount),
        InstanceMethod("setThreads", &BackendWrap::SetThreads),
        InstanceMethod("setBlasMode", &BackendWrap::SetBlasMode),
        InstanceMethod("setSimdLevel", &BackendWrap::SetSimdLevel),
        InstanceMethod("createModel", &BackendWrap::CreateModel),
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
  Napi::Value SetBlasMode(const Napi::CallbackInfo& info) {
    Args a(info, "setBlasMode");
    return Napi::Boolean::New(info.Env(), be_->rs_set_blas_mode(a.i32(0, "mode", 0, 2)) != 0);
  }
  Napi::Value SetSimdLevel(const Napi::CallbackInfo& info) {
    Args a(info, "setSimdLevel");
    return Napi::Boolean::New(info.Env(), be_->rs_set_simd_level(a.i32(0, "level", 0, 1)) != 0);
  }
  Napi::Value CreateModel(const Napi::CallbackInfo& info) { return create_model(be_, info); }
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
  env.SetInstanceData(data);
  exports.Set("openBackend", Napi::Function::New(env, OpenBackend));
  exports.Set("abiVersion", Napi::Number::New(env, RS_ABI_VERSION));
  return exports;
}

}  // namespace

NODE_API_MODULE(rollstream_kernels, Init)
