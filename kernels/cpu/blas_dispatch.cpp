#include "blas_dispatch.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rs::blas {

namespace {
using cblas_sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                                float*, int);
using set_threads_fn = void (*)(int);
using get_config_fn = char* (*)();

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

struct Lib {
  void* handle = nullptr;
  cblas_sgemm_fn sgemm = nullptr;
  set_threads_fn set_threads = nullptr;
  std::string desc = "none";
};

Lib& lib() {
  static Lib l;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("ROLLSTREAM_BLAS");
    if (env && (!std::strcmp(env, "off") || !std::strcmp(env, "0") || !std::strcmp(env, "none"))) {
      l.desc = "none (ROLLSTREAM_BLAS=off)";
      return;
    }
    // OpenBLAS's idle threads spin (sched_yield) for 2^28 cycles after each call by default, stealing the
    // cores our OpenMP kernels run on between products; let them sleep almost at once unless the user chose.
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
    // Debian/Ubuntu install the pthread build under several names; try the generic soname first.
    const char* names[] = {"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0",
                           "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                           "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
                           "/usr/lib64/libopenblas.so.0", "/usr/local/lib/libopenblas.so.0"};
    for (const char* n : names) {
      void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (!h) continue;
      auto f = reinterpret_cast<cblas_sgemm_fn>(dlsym(h, "cblas_sgemm"));
      if (!f) {
        dlclose(h);
        continue;
      }
      l.handle = h;
      l.sgemm = f;
      l.set_threads = reinterpret_cast<set_threads_fn>(dlsym(h, "openblas_set_num_threads"));
      auto cfg = reinterpret_cast<get_config_fn>(dlsym(h, "openblas_get_config"));
      l.desc = std::string("openblas (") + n + ")";
      if (cfg) l.desc += std::string(" ") + cfg();
      return;
    }
    l.desc = "none (libopenblas.so.0 not found)";
  });
  return l;
}

std::atomic<int> g_mode{0};
std::mutex g_threads_mu;
int g_threads_set = -1;
}  // namespace

bool available() { return g_mode.load() == 0 && lib().sgemm != nullptr; }

std::string describe() {
  if (g_mode.load() != 0) return "none (disabled)";
  return lib().desc;
}

bool set_mode(int mode) {
  g_mode.store(mode == 0 ? 0 : 1);
  return available();
}

void sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
           float beta, float* C, int ldc, int threads) {
  Lib& l = lib();
  if (l.set_threads) {
    // The count is global inside OpenBLAS; only touch it when it changes (resizing its pool is not free).
    std::lock_guard<std::mutex> g(g_threads_mu);
    if (g_threads_set != threads) {
      l.set_threads(threads);
      g_threads_set = threads;
    }
  }
  l.sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace rs::blas
