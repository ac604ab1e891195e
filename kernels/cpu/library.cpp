// Library-level entry points: ABI version, backend description, thread count, BLAS mode.
#include <cstdio>
#include <string>

#include "blas_dispatch.h"
#include "common.h"
#include "gemm_router.h"
#include "sgemm.h"

using namespace rs;

extern "C" {

int32_t rs_abi_version(void) { return RS_ABI_VERSION; }
int32_t rs_device_count(void) { return 1; }
void rs_set_num_threads(int32_t n) { set_current_threads(n); }
int32_t rs_set_blas_mode(int32_t mode) {
  const bool on = blas::set_mode(mode);
  router::reset();
  return on ? 1 : 0;
}
int32_t rs_set_simd_level(int32_t level) {
  sgemm_force_avx2(level != 0);
  return sgemm_uses_avx512() ? 1 : 0;
}

static std::string json_escape(const std::string& s) {
  std::string esc;
  for (char c : s) {
    if (c == '"' || c == '\\') esc += '\\';
    if ((unsigned char)c >= 0x20) esc += c;
  }
  return esc;
}

int32_t rs_backend_info(char* buf, int32_t cap) {
  const int n = std::snprintf(
      buf, cap > 0 ? cap : 0,
      "{\"device\":\"cpu\",\"blas\":\"%s\",\"blas_mode\":\"%s\",\"blas_routes\":\"%s\",\"blas_dispatch\":\"%s\",\"threads\":%d,"
      "\"simd\":\"%s\",\"abi\":%d}",
      json_escape(blas::describe()).c_str(), blas::mode_name(), json_escape(router::routes()).c_str(),
      json_escape(router::decision()).c_str(), current_threads(), sgemm_uses_avx512() ? "avx2+fma+avx512f-sgemm" : "avx2+fma",
      RS_ABI_VERSION);
  return n < 0 || n >= cap ? RS_ERR_INVALID_ARGUMENT : RS_OK;
}

}  // extern "C"
