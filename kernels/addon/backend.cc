#include "backend.h"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace {

template <typename F>
void sym(void* h, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(h, name));
}

// All of the NCCL entry points, or none (a library without them has no NCCL path).
void resolve_nccl(void* h, NcclFns& n) {
  sym(h, "rs_nccl_available", n.available);
  sym(h, "rs_nccl_describe", n.describe);
  sym(h, "rs_nccl_last_error", n.last_error);
  sym(h, "rs_nccl_unique_id", n.unique_id);
  sym(h, "rs_nccl_init", n.init);
  sym(h, "rs_nccl_model_reduce_scatter_grads", n.model_reduce_scatter_grads);
  sym(h, "rs_nccl_model_all_gather_params", n.model_all_gather_params);
  if (!n.available || !n.describe || !n.last_error || !n.unique_id || !n.init || !n.model_reduce_scatter_grads || !n.model_all_gather_params)
    n = NcclFns{};
}

std::mutex g_nccl_mu;
std::vector<void*> g_nccl_comms;

}  // namespace

int nccl_handle_put(void* comm) {
  std::lock_guard<std::mutex> g(g_nccl_mu);
  g_nccl_comms.push_back(comm);
  return (int)g_nccl_comms.size() - 1;
}

void* nccl_handle_get(int handle) {
  std::lock_guard<std::mutex> g(g_nccl_mu);
  return handle >= 0 && (size_t)handle < g_nccl_comms.size() ? g_nccl_comms[(size_t)handle] : nullptr;
}

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
  resolve_nccl(h, b->nccl);
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
