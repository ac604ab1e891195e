// Host-side error reporting through the ABI's rs_error, shared by the CPU and CUDA libraries so both
// report the same way.
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "../kernels.h"

namespace rs_shared {

// Fills err (when given) and returns the code, so validation reads `return fail(err, CODE, "...")`.
inline int32_t fail(rs_error* err, int32_t code, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
inline int32_t fail(rs_error* err, int32_t code, const char* fmt, ...) {
  if (err) {
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
  }
  return code;
}

inline int32_t ok(rs_error* err) {
  if (err) {
    err->code = RS_OK;
    err->message[0] = 0;
  }
  return RS_OK;
}

}  // namespace rs_shared
