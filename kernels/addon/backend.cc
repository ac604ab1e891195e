#include "backend.h"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

Backend* open_backend(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Backend>> open;
  std::lock_guard<std::mutex> g(mu);
  auto it = open.find(path);
  if (it != open.end()) return it->second.get();
  // RTLD_LOCAL keeps the backend's symbols (and its OpenMP/BLAS dependencies) out of Node's namespace.
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw std::runtime_error("cannot load kernels backend " + path + ": " + dlerror());
  auto b = std::make_unique<Backend>();
  b->handle = h;
  b->path = path;
#define RS_RESOLVE_FN(name)                                                                              \
  b->name = reinterpret_cast<decltype(b->name)>(dlsym(h, #name));                                        \
  if (!b->name) {                                                                                        \
    dlclose(h);                                                                                          \
    throw std::runtime_error("kernels backend " + path + " does not export " #name " (stale build?)");  \
  }
  RS_BACKEND_FUNCS(RS_RESOLVE_FN)
#undef RS_RESOLVE_FN
  const int abi = b->rs_abi_version();
  if (abi != RS_ABI_VERSION) {
    dlclose(h);
    throw std::runtime_error("kernels backend " + path + " has ABI version " + std::to_string(abi) + ", the addon expects " +
                             std::to_string(RS_ABI_VERSION) + " (rebuild with node-gyp)");
  }
  Backend* raw = b.get();
  open.emplace(path, std::move(b));
  return raw;
}
