#include "blas_dispatch.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "blas_coretype.h"

namespace rs::blas {

namespace {
using cblas_sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                                float*, int);
using set_threads_fn = void (*)(int);
using get_string_fn = char* (*)();

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

// Set by library.cpp from rs_settings / rs_test_hooks; read when the library is loaded (its first use).
std::mutex g_cfg_mu;
std::string g_lib_path;     // rs_settings.blas_lib: "" = the usual names
std::string g_loaded_path;  // the blas_lib the load used (it cannot change afterwards)
std::string g_fake_core;    // rs_test_hooks.blas_detected_core
std::atomic<bool> g_load_started{false};

struct Lib {
  void* handle = nullptr;
  cblas_sgemm_fn sgemm = nullptr;
  set_threads_fn set_threads = nullptr;
  std::string desc = "none";
};

std::string call_string(void* h, const char* sym) {
  auto f = reinterpret_cast<get_string_fn>(dlsym(h, sym));
  const char* s = f ? f() : nullptr;
  return s ? std::string(s) : std::string();
}

// Debian/Ubuntu install OpenBLAS under several names. rs_settings.blas_lib names one library to use instead.
void* open_first(const std::string& lib, const char** used) {
  if (!lib.empty()) {
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h && dlsym(h, "cblas_sgemm")) {
      *used = lib.c_str();
      return h;
    }
    if (h) dlclose(h);
    return nullptr;
  }
  // The generic soname first (Debian's alternatives: the pthread build unless the admin chose otherwise). Debian's
  // OpenMP build shares our kernels' OpenMP threads and ran sgemm 1.7x faster than the pthread build inside a
  // training step here, but a replay on it was not bit-exact (kernels/NOTES.md): rs_settings.blas_lib selects it.
  const char* names[] = {"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0",
                         "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                         "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
                         "/usr/lib64/libopenblas.so.0", "/usr/local/lib/libopenblas.so.0"};
  for (const char* n : names) {
    void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    if (!dlsym(h, "cblas_sgemm")) {
      dlclose(h);
      continue;
    }
    *used = n;
    return h;
  }
  return nullptr;
}

// OpenBLAS reads OPENBLAS_CORETYPE once, in its constructor: the only way to change its core is to load it with
// the variable set. So it is loaded once as it is, asked which core it chose, and, when that core lacks the CPU's
// vector units, unloaded and loaded again with the variable set (then unset, so child processes decide alone).
// OPENBLAS_CORETYPE and OPENBLAS_THREAD_TIMEOUT are OpenBLAS's own variables, the only way to hand it these choices;
// none of rollstream's settings travel through the environment.
void load(Lib& l) {
  std::string lib_path, fake;
  {
    std::lock_guard<std::mutex> g(g_cfg_mu);
    g_load_started = true;  // under the lock: set_lib sees the path this load uses
    lib_path = g_loaded_path = g_lib_path;
    fake = g_fake_core;
  }
  // OpenBLAS's idle threads spin (sched_yield) for 2^28 cycles after each call by default, stealing the
  // cores our OpenMP kernels run on between products; let them sleep almost at once unless the user chose.
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  // The user's own OPENBLAS_CORETYPE is OpenBLAS's setting, read to leave it alone (blas_coretype.h).
  const char* user_env = std::getenv("OPENBLAS_CORETYPE");
  const std::string user = user_env ? user_env : "";
  // Test hook (rs_test_hooks): load the first time as if OpenBLAS had detected this core (a CPU it does not know).
  const bool faking = !fake.empty() && user.empty();
  if (faking) setenv("OPENBLAS_CORETYPE", fake.c_str(), 1);
  const char* name = nullptr;
  void* h = open_first(lib_path, &name);
  if (faking) unsetenv("OPENBLAS_CORETYPE");
  if (!h) {
    l.desc = !lib_path.empty() ? "none (blas_lib " + lib_path + " is not a loadable BLAS with cblas_sgemm)" : "none (libopenblas.so.0 not found)";
    return;
  }
  const std::string detected = call_string(h, "openblas_get_corename");
  const bool dynamic = call_string(h, "openblas_get_config").find("DYNAMIC_ARCH") != std::string::npos;
  const CoretypeChoice choice = choose_coretype(detected, cpu_simd_level(), user.c_str(), dynamic);
  std::string note = choice.why;
  if (!choice.force.empty()) {
    dlclose(h);
    if (void* still = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
      h = still;  // something else in this process holds it: its core stays
      note += "; not switched: the library is also loaded by something else in this process";
    } else {
      setenv("OPENBLAS_CORETYPE", choice.force.c_str(), 1);
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      unsetenv("OPENBLAS_CORETYPE");
      if (!h) {
        l.desc = std::string("none (reloading ") + name + " with OPENBLAS_CORETYPE=" + choice.force + " failed: " + dlerror() + ")";
        return;
      }
      const std::string now = call_string(h, "openblas_get_corename");
      note = lowercase(now) == lowercase(choice.force) ? "forced from " + detected + ": " + choice.why
                                                       : "asked for " + choice.force + " (" + choice.why + ") but OpenBLAS chose " + now;
    }
  }
  l.handle = h;
  l.sgemm = reinterpret_cast<cblas_sgemm_fn>(dlsym(h, "cblas_sgemm"));
  l.set_threads = reinterpret_cast<set_threads_fn>(dlsym(h, "openblas_set_num_threads"));
  const std::string config = call_string(h, "openblas_get_config"), core = call_string(h, "openblas_get_corename");
  l.desc = std::string("openblas (") + name + ")" + (config.empty() ? "" : " " + config);
  if (!core.empty()) l.desc += ", core " + core;
  if (!note.empty()) l.desc += " (" + note + ")";
}

Lib& lib() {
  static Lib l;
  static std::once_flag once;
  std::call_once(once, [] { load(l); });
  return l;
}

std::atomic<int> g_mode{(int)Mode::Auto};
std::mutex g_threads_mu;
int g_threads_set = -1;
}  // namespace

int cpu_simd_level() {
  __builtin_cpu_init();
  // OpenBLAS's SkylakeX kernels are built for skylake-avx512: F, BW, DQ and VL (libgcc also checks the OS saves zmm).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return kSimdAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return kSimdAvx2;
  if (__builtin_cpu_supports("avx")) return kSimdAvx;
  return kSimdSse;
}

// Off before the first use: the library is never loaded (nothing of it runs in this process).
bool loaded() { return (g_mode.load() != (int)Mode::Off || g_load_started) && lib().sgemm != nullptr; }
bool available() { return g_mode.load() != (int)Mode::Off && loaded(); }
Mode mode() { return static_cast<Mode>(g_mode.load()); }
const char* mode_name() {
  switch (mode()) {
    case Mode::Off: return "off";
    case Mode::On: return "on";
    default: return "auto";
  }
}

std::string describe() {
  if (g_mode.load() == (int)Mode::Off && !g_load_started) return "none (blas_mode off: never loaded)";
  if (!lib().sgemm) return lib().desc;  // why it is not there says more than the mode
  if (g_mode.load() == (int)Mode::Off) return "none (disabled)";
  return lib().desc;
}

void set_mode(int m) { g_mode.store(m == 1 ? (int)Mode::Off : m == 2 ? (int)Mode::On : (int)Mode::Auto); }

bool set_lib(const std::string& path, std::string* why) {
  std::lock_guard<std::mutex> g(g_cfg_mu);
  if (g_load_started && path != g_loaded_path) {
    *why = "blas_lib cannot change after BLAS's first use (loaded from " + (g_loaded_path.empty() ? std::string("the usual names") : g_loaded_path) +
           "): set it before, or in a fresh process";
    return false;
  }
  g_lib_path = path;
  return true;
}

void set_test_detected_core(const std::string& core) {
  std::lock_guard<std::mutex> g(g_cfg_mu);
  g_fake_core = core;
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
