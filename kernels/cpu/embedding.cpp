// Token embedding lookup and its scatter-add backward.
#include "common.h"
#include "ops.h"

namespace rs {

void embedding_fwd(const float* table, int D, const int32_t* ids, int T, float* out, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < T; t++) std::memcpy(out + (int64_t)t * D, table + (int64_t)ids[t] * D, sizeof(float) * D);
}

void embedding_bwd(const float* dout, const int32_t* ids, int T, int D, float* dtable) {
  // Serial over tokens: a repeated id accumulates in token order, whatever the thread count.
  for (int t = 0; t < T; t++) {
    float* row = dtable + (int64_t)ids[t] * D;
    const float* g = dout + (int64_t)t * D;
    for (int i = 0; i < D; i++) row[i] += g[i];
  }
}

}  // namespace rs

using namespace rs;

static int32_t check_ids(const char* what, const int32_t* ids, int32_t T, int32_t V, int32_t D, rs_error* err) {
  if (T < 1 || V < 1 || D < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: sizes must be positive (T=%d V=%d D=%d)", what, T, V, D);
  if (!ids) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: null ids", what);
  for (int32_t t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= V) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: token id %d at index %d is outside the vocab [0, %d)", what, ids[t], t, V);
  return RS_OK;
}

extern "C" {

int32_t rs_embedding_fwd(const float* table, int32_t V, int32_t D, const int32_t* ids, int32_t T, float* out, rs_error* err) {
  if (int32_t s = check_ids("embedding_fwd", ids, T, V, D, err)) return s;
  if (!table || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "embedding_fwd: null buffer");
  embedding_fwd(table, D, ids, T, out, current_threads());
  return ok(err);
}

int32_t rs_embedding_bwd(const float* dout, const int32_t* ids, int32_t T, int32_t V, int32_t D, float* dtable, rs_error* err) {
  if (int32_t s = check_ids("embedding_bwd", ids, T, V, D, err)) return s;
  if (!dout || !dtable) return fail(err, RS_ERR_INVALID_ARGUMENT, "embedding_bwd: null buffer");
  embedding_bwd(dout, ids, T, D, dtable);
  return ok(err);
}

}  // extern "C"
