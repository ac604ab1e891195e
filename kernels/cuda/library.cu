// Library-level entry points: ABI version, backend description, device count, thread count, settings.
#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "../shared/settings.h"
#include "common.cuh"
#include "cublas_loader.cuh"
#include "gemm.cuh"

using namespace rsc;

namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if ((unsigned char)c >= 0x20) out += c;
  }
  return out;
}

// Host threads used by the CUDA backend itself (top-k/top-p sampling on the host); 0 = all cores.
std::atomic<int> g_threads{0};

rs_shared::SettingsStore g_settings;
std::mutex g_set_mu;  // one rs_set_settings at a time: check, then apply

}  // namespace

namespace rsc {
int host_threads() {
  const int n = g_threads.load();
  if (n > 0) return n;
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? (int)hc : 1;
}
}  // namespace rsc

extern "C" {

int32_t rs_abi_version(void) { return RS_ABI_VERSION; }

int32_t rs_device_count(void) { return device_count(); }

void rs_set_num_threads(int32_t n) { g_threads.store(n > 0 ? n : 0); }

// The CPU fields (blas_lib, blas_routes, simd_level) are kept for rs_get_settings and otherwise ignored. blas_mode 2
// ("on") is the CPU backend's unmeasured OpenBLAS rule; here it means what 0 does: cuBLAS when it loads.
int32_t rs_set_settings(const rs_settings* in, rs_error* err) {
  rs_shared::Settings s;
  if (const int32_t st = rs_shared::read_settings(in, &s, err)) return st;
  std::lock_guard<std::mutex> g(g_set_mu);
  std::string why;
  if (!cublas::set_lib(s.cublas_lib, &why)) return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_settings: %s", why.c_str());
  cublas::set_mode(s.blas_mode == RS_BLAS_OFF ? 1 : 0);
  set_matmul_setting(s.cuda_matmul);
  set_sync_debug(s.cuda_sync != 0);
  g_settings.set(std::move(s));
  return ok(err);
}

void rs_get_settings(rs_settings* out) { g_settings.view(out); }

// The hooks steer the CPU dispatcher only; accepted (and checked) so one test helper serves both backends.
int32_t rs_set_test_hooks(const rs_test_hooks* h, rs_error* err) {
  if (!h) return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_test_hooks: hooks is NULL");
  return ok(err);
}

int32_t rs_backend_info(char* buf, int32_t cap) {
  std::string gpu = "none (" + no_device_reason() + ")";
  if (device_count() > 0) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
      gpu = std::string(p.name) + " sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
            std::to_string((long long)(p.totalGlobalMem >> 20)) + " MiB";
    else
      cudaGetLastError();
  }
  // The mode a model created now runs (model.cu): a cuBLAS handle is assumed whenever cuBLAS is available.
  const std::string matmul = math_mode_name(model_math_mode(cublas::available()));
  // "simd" carries the GPU description (the field is the CPU backend's instruction set).
  const int n = std::snprintf(buf, cap > 0 ? cap : 0,
                              "{\"device\":\"cuda\",\"blas\":\"%s\",\"threads\":%d,\"simd\":\"%s\",\"matmul\":\"%s\",\"abi\":%d}",
                              json_escape(cublas::describe()).c_str(), host_threads(), json_escape(gpu).c_str(), matmul.c_str(),
                              RS_ABI_VERSION);
  return n < 0 || n >= cap ? RS_ERR_INVALID_ARGUMENT : RS_OK;
}

}  // extern "C"
