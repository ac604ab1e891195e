// Library-level entry points: ABI version, backend description, thread count, BLAS mode.
#include <string>

#include "blas_dispatch.h"
#include "common.h"
#include "sgemm.h"

using namespace rs;

extern "C" {

int32_t rs_abi_version(void) { return RS_ABI_VERSION; }
int32_t rs_device_count(void) { return 1; }
void rs_set_num_threads(int32_t n) { set_current_threads(n); }
int32_t rs_set_blas_mode(int32_t mode) { return blas::set_mode(mode) ? 1 : 0; }
int32_t rs_set_simd_level(int32_t level) {
  sgemm_force_avx2(level != 0);
  return sgemm_uses_avx512() ? 1 : 0;
}

int32_t rs_backend_info(char* buf, int32_t cap) {
  std::string blas = blas::describe();
  std::string esc;
  for (char c : blas) {
    if (c == '"' || c == '\\') esc += '\\';
    if ((unsigned char)c >= 0x20) esc += c;
  }
  const int n = std::snprintf(buf, cap > 0 ? cap : 0,
                              "{\"device\":\"cpu\",\"blas\":\"%s\",\"threads\":%d,\"simd\":\"%s\",\"abi\":%d}", esc.c_str(),
                              current_threads(), sgemm_uses_avx512() ? "avx2+fma+avx512f-sgemm" : "avx2+fma", RS_ABI_VERSION);
  return n < 0 || n >= cap ? RS_ERR_INVALID_ARGUMENT : RS_OK;
}

}  // extern "C"
