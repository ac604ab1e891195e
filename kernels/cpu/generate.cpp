// rs_model_generate on the CPU: the batch API as a loop over the step engine (shared/generate_engine.h).
#include <new>

#include "../shared/generate_engine.h"
#include "engine.h"

using namespace rs;

extern "C" {

int32_t rs_model_generate(rs_model* m, const int32_t* flat, const int64_t* off, int32_t n, const uint64_t* seeds,
                          const rs_generate_config* c, rs_generate_output* o, rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: null model");
  try {
    return rs_shared::generate_over_engine(m->d, flat, off, n, seeds, c, o, err, [m](int n_blocks, int block_size) { return make_cpu_runner(m, n_blocks, block_size); });
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "generate: out of memory for the KV blocks of %d sequences", n);
  }
}

}  // extern "C"
