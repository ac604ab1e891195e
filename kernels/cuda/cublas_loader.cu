#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "cublas_loader.cuh"

namespace rsc::cublas {

namespace {

// Prototypes from cublas_api.h with the opaque types spelled as their C ABI equivalents (handles are pointers,
// enums are ints), so no cuBLAS header is needed at build time.
using create_fn = int (*)(void** handle);
using destroy_fn = int (*)(void* handle);
using set_stream_fn = int (*)(void* handle, cudaStream_t stream);
using get_version_fn = int (*)(void* handle, int* version);
using status_string_fn = const char* (*)(int status);
using gemm_ex_fn = int (*)(void* handle, int transa, int transb, int m, int n, int k, const void* alpha, const void* A, int Atype,
                           int lda, const void* B, int Btype, int ldb, const void* beta, void* C, int Ctype, int ldc,
                           int computeType, int algo);

struct Lib {
  void* handle = nullptr;
  std::string file, why;
  create_fn create = nullptr;
  destroy_fn destroy = nullptr;
  set_stream_fn set_stream = nullptr;
  get_version_fn get_version = nullptr;
  status_string_fn status_string = nullptr;
  gemm_ex_fn gemm_ex = nullptr;
  int version = 0;
};

std::once_flag g_once;
Lib g_lib;
std::atomic<int> g_mode{0};
std::mutex g_cfg_mu;
std::string g_path, g_loaded_path;  // rs_settings.cublas_lib; the one the load used
std::atomic<bool> g_load_started{false};

void load() {
  std::call_once(g_once, [] {
    std::vector<std::string> names;
    {
      std::lock_guard<std::mutex> g(g_cfg_mu);
      g_load_started = true;  // under the lock: set_lib sees the path this load uses
      g_loaded_path = g_path;
      if (!g_path.empty()) names.push_back(g_path);
    }
    for (const char* n : {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}) names.push_back(n);
    std::string tried;
    for (const std::string& n : names) {
      void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        tried += (tried.empty() ? "" : "; ") + n;
        continue;
      }
      Lib l;
      l.handle = h;
      l.file = n;
      l.create = reinterpret_cast<create_fn>(dlsym(h, "cublasCreate_v2"));
      l.destroy = reinterpret_cast<destroy_fn>(dlsym(h, "cublasDestroy_v2"));
      l.set_stream = reinterpret_cast<set_stream_fn>(dlsym(h, "cublasSetStream_v2"));
      l.get_version = reinterpret_cast<get_version_fn>(dlsym(h, "cublasGetVersion_v2"));
      l.status_string = reinterpret_cast<status_string_fn>(dlsym(h, "cublasGetStatusString"));  // optional (11.4+)
      l.gemm_ex = reinterpret_cast<gemm_ex_fn>(dlsym(h, "cublasGemmEx"));
      if (!l.create || !l.destroy || !l.set_stream || !l.gemm_ex) {
        tried += (tried.empty() ? "" : "; ") + n + " (missing symbols)";
        dlclose(h);
        continue;
      }
      g_lib = l;
      return;
    }
    g_lib.why = "cannot load cuBLAS (tried " + tried + "; name the file in the cublas_lib setting)";
  });
}

bool mode_allows() { return g_mode.load() == 0; }

const char* status_text(int s) {
  if (g_lib.status_string) {
    const char* t = g_lib.status_string(s);
    if (t) return t;
  }
  return "cuBLAS error";
}

}  // namespace

bool available() {
  if (!mode_allows()) return false;
  load();
  return g_lib.handle != nullptr;
}

std::string describe() {
  if (!mode_allows()) return g_load_started ? "none (disabled)" : "none (blas_mode off: never loaded)";
  load();
  if (!g_lib.handle) return "none (" + g_lib.why + ")";
  std::string v;
  if (g_lib.version > 0) v = " " + std::to_string(g_lib.version / 10000) + "." + std::to_string(g_lib.version / 100 % 100);
  return "cublas" + v + " (" + g_lib.file + ")";
}

void set_mode(int mode) { g_mode.store(mode == 0 ? 0 : 1); }

bool set_lib(const std::string& path, std::string* why) {
  std::lock_guard<std::mutex> g(g_cfg_mu);
  if (g_load_started && path != g_loaded_path) {
    *why = "cublas_lib cannot change after cuBLAS's first use (loaded with " + (g_loaded_path.empty() ? std::string("the loader path's names") : g_loaded_path) +
           "): set it before, or in a fresh process";
    return false;
  }
  g_path = path;
  return true;
}

void* create_handle(cudaStream_t s) {
  if (!available()) raise(RS_ERR_UNSUPPORTED, "cuBLAS is not available: %s", describe().c_str());
  void* h = nullptr;
  int st = g_lib.create(&h);
  if (st != 0 || !h) raise(RS_ERR_INTERNAL, "cublasCreate failed: %s (%d)", status_text(st), st);
  st = g_lib.set_stream(h, s);
  if (st != 0) {
    g_lib.destroy(h);
    raise(RS_ERR_INTERNAL, "cublasSetStream failed: %s (%d)", status_text(st), st);
  }
  if (g_lib.version == 0 && g_lib.get_version) {
    int v = 0;
    if (g_lib.get_version(h, &v) == 0) g_lib.version = v;  // benign race: every thread writes the same value
  }
  return h;
}

void destroy_handle(void* h) {
  if (h && g_lib.destroy) g_lib.destroy(h);
}

void* thread_handle(cudaStream_t s) {
  // Never destroyed (see thread_stream()); one handle per thread that runs a stand-alone gemm.
  static thread_local void* h = nullptr;
  static thread_local cudaStream_t bound = nullptr;
  if (!h) {
    h = create_handle(s);
    bound = s;
  } else if (bound != s) {
    const int st = g_lib.set_stream(h, s);
    if (st != 0) raise(RS_ERR_INTERNAL, "cublasSetStream failed: %s (%d)", status_text(st), st);
    bound = s;
  }
  return h;
}

void gemm(void* handle, bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int a_type, int lda, const void* B,
          int b_type, int ldb, float beta, float* C, int ldc, int compute, const char* what) {
  // Column-major view: C^T [N, M] = op(B)^T [N, K] * op(A)^T [K, M]. A row-major matrix with row stride ld is
  // its own transpose in column-major with leading dimension ld, so the flags carry over unchanged.
  constexpr int kOpN = 0, kOpT = 1, kAlgoDefault = -1;
  const int st = g_lib.gemm_ex(handle, tb ? kOpT : kOpN, ta ? kOpT : kOpN, N, M, K, &alpha, B, b_type, ldb, A, a_type, lda, &beta, C,
                               kR32F, ldc, compute, kAlgoDefault);
  if (st != 0)
    raise(RS_ERR_INTERNAL, "cublasGemmEx failed in %s: %s (%d) [M=%d N=%d K=%d ta=%d tb=%d]", what, status_text(st), st, M, N, K,
          (int)ta, (int)tb);
}

}  // namespace rsc::cublas
