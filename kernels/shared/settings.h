// rs_settings (kernels.h) as both libraries keep it: owned copies of the strings, the range checks every field
// gets before any is applied, and the C view rs_get_settings hands out. What each field does is the backend's
// business (cpu/library.cpp, cuda/library.cu); this header only stores and checks.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>

#include "../kernels.h"
#include "errors.h"

namespace rs_shared {

struct Settings {
  int32_t blas_mode = RS_BLAS_AUTO;
  std::string blas_lib, blas_routes;
  int32_t simd_level = 0;
  int32_t cuda_matmul = RS_MATMUL_DEFAULT;
  int32_t cuda_sync = 0;
  std::string cublas_lib;
};

inline const char* blas_mode_name(int32_t mode) { return mode == RS_BLAS_OFF ? "off" : mode == RS_BLAS_ON ? "on" : "auto"; }

// The settings as given, or RS_ERR_INVALID_ARGUMENT naming the field and what it accepts.
inline int32_t read_settings(const rs_settings* in, Settings* out, rs_error* err) {
  if (!in) return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_settings: settings is NULL");
  if (in->blas_mode < RS_BLAS_AUTO || in->blas_mode > RS_BLAS_ON)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_settings: blas_mode must be 0 (auto), 1 (off) or 2 (on), got %d", in->blas_mode);
  if (in->simd_level < 0 || in->simd_level > 1)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_settings: simd_level must be 0 (best) or 1 (AVX2 only), got %d", in->simd_level);
  if (in->cuda_matmul < RS_MATMUL_DEFAULT || in->cuda_matmul > RS_MATMUL_BF16)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_settings: cuda_matmul must be 0 (default), 1 (fp32), 2 (tf32) or 3 (bf16), got %d",
                in->cuda_matmul);
  if (in->cuda_sync < 0 || in->cuda_sync > 1)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_settings: cuda_sync must be 0 or 1, got %d", in->cuda_sync);
  Settings s;
  s.blas_mode = in->blas_mode;
  s.blas_lib = in->blas_lib ? in->blas_lib : "";
  s.blas_routes = in->blas_routes ? in->blas_routes : "";
  s.simd_level = in->simd_level;
  s.cuda_matmul = in->cuda_matmul;
  s.cuda_sync = in->cuda_sync;
  s.cublas_lib = in->cublas_lib ? in->cublas_lib : "";
  *out = std::move(s);
  return ok(err);
}

// The settings in force. set() publishes a new value; view() fills the C struct with pointers into the published
// copy, which lives until the next set() (as kernels.h promises).
class SettingsStore {
 public:
  Settings get() const {
    std::lock_guard<std::mutex> g(mu_);
    return cur_;
  }
  void set(Settings s) {
    std::lock_guard<std::mutex> g(mu_);
    cur_ = std::move(s);
  }
  void view(rs_settings* out) const {
    if (!out) return;
    std::lock_guard<std::mutex> g(mu_);
    out->blas_mode = cur_.blas_mode;
    out->blas_lib = cur_.blas_lib.c_str();
    out->blas_routes = cur_.blas_routes.c_str();
    out->simd_level = cur_.simd_level;
    out->cuda_matmul = cur_.cuda_matmul;
    out->cuda_sync = cur_.cuda_sync;
    out->cublas_lib = cur_.cublas_lib.c_str();
  }

 private:
  mutable std::mutex mu_;
  Settings cur_;
};

}  // namespace rs_shared
