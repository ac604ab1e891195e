// Library-level entry points: ABI version, backend description, thread count, settings (and the test hooks).
#include <cstdio>
#include <mutex>
#include <string>

#include "../shared/settings.h"
#include "blas_dispatch.h"
#include "common.h"
#include "gemm_router.h"
#include "sgemm.h"

using namespace rs;

namespace {
rs_shared::SettingsStore g_settings;
std::mutex g_set_mu;  // one rs_set_settings / rs_set_test_hooks at a time: check, then apply
}  // namespace

extern "C" {

int32_t rs_abi_version(void) { return RS_ABI_VERSION; }
int32_t rs_device_count(void) { return 1; }
void rs_set_num_threads(int32_t n) { set_current_threads(n); }

int32_t rs_set_settings(const rs_settings* in, rs_error* err) {
  rs_shared::Settings s;
  if (const int32_t st = rs_shared::read_settings(in, &s, err)) return st;
  std::lock_guard<std::mutex> g(g_set_mu);
  std::string why;
  if (!router::check_routes(s.blas_routes, &why)) return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_settings: %s", why.c_str());
  // The last check: once it passes, every field is applied.
  if (!blas::set_lib(s.blas_lib, &why)) return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_settings: %s", why.c_str());
  blas::set_mode(s.blas_mode);
  sgemm_force_avx2(s.simd_level != 0);
  router::reset(s.blas_routes);
  g_settings.set(std::move(s));
  return rs_shared::ok(err);
}

void rs_get_settings(rs_settings* out) { g_settings.view(out); }

int32_t rs_set_test_hooks(const rs_test_hooks* h, rs_error* err) {
  if (!h) return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_test_hooks: hooks is NULL");
  if (h->slowdown_own < 0 || h->slowdown_blas < 0)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "rs_set_test_hooks: slowdowns must be >= 0 (got %d, %d)", h->slowdown_own, h->slowdown_blas);
  std::lock_guard<std::mutex> g(g_set_mu);
  blas::set_test_detected_core(h->blas_detected_core ? h->blas_detected_core : "");
  router::set_test_hooks(h->slowdown_own, h->slowdown_blas, h->corrupt_blas != 0);
  router::reset(g_settings.get().blas_routes);
  return rs_shared::ok(err);
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
