// The CUDA engine runner (engine.cu), for rs_engine_create and for rs_model_generate, which runs on the engine.
#pragma once
#include <memory>

#include "../shared/engine_core.h"
#include "model.cuh"

namespace rsc {

std::unique_ptr<rs_shared::EngineRunner> make_cuda_runner(rs_model* m, int n_blocks, int block_size);

}  // namespace rsc
