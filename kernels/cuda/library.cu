// Library-level entry points: ABI version, backend description, device count, thread count, BLAS mode.
#include <atomic>
#include <string>
#include <thread>

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

// Mode 2 ("on") is the CPU backend's unmeasured OpenBLAS rule; here it means what 0 does: cuBLAS when it loads.
int32_t rs_set_blas_mode(int32_t mode) { return cublas::set_mode(mode == 1 ? 1 : 0) ? 1 : 0; }

// No SIMD levels on this backend: the call is accepted and reports 0 (no AVX-512 sgemm).
int32_t rs_set_simd_level(int32_t level) {
  (void)level;
  return 0;
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
  std::string matmul;
  try {
    matmul = math_mode_name(math_mode_from_env());
  } catch (const Failure& f) {
    matmul = "invalid ROLLSTREAM_CUDA_MATMUL";
  }
  // "simd" carries the GPU description (the field is the CPU backend's instruction set).
  const int n = std::snprintf(buf, cap > 0 ? cap : 0,
                              "{\"device\":\"cuda\",\"blas\":\"%s\",\"threads\":%d,\"simd\":\"%s\",\"matmul\":\"%s\",\"abi\":%d}",
                              json_escape(cublas::describe()).c_str(), host_threads(), json_escape(gpu).c_str(), matmul.c_str(),
                              RS_ABI_VERSION);
  return n < 0 || n >= cap ? RS_ERR_INVALID_ARGUMENT : RS_OK;
}

}  // extern "C"
