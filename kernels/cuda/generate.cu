// rs_model_generate on the GPU: the batch API as a loop over the step engine (shared/generate_engine.h), the same
// schedule, cache and sampler as the CPU backend's, so the batch and step APIs give the same tokens.
#include "../shared/generate_engine.h"
#include "engine.cuh"

using namespace rsc;

extern "C" {

int32_t rs_model_generate(rs_model* m, const int32_t* flat, const int64_t* off, int32_t n, const uint64_t* seeds, const rs_generate_config* c,
                          rs_generate_output* o, rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "generate: null model");
  rs_error local{};
  int32_t st = RS_OK;
  if (int32_t g = guard(err, "generate", [&] {
        model_enter(m);
        st = rs_shared::generate_over_engine(m->d, flat, off, n, seeds, c, o, &local,
                                             [m](int n_blocks, int block_size) { return make_cuda_runner(m, n_blocks, block_size); });
        sync_stream(m->stream, "generate");
      }))
    return g;
  if (err) *err = local;
  return st;
}

}  // extern "C"
