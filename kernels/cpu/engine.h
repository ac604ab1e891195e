// The CPU engine runner (engine.cpp), for rs_engine_create and for rs_model_generate, which runs on the engine.
#pragma once
#include <memory>

#include "../shared/engine_core.h"
#include "model.h"

namespace rs {

std::unique_ptr<rs_shared::EngineRunner> make_cpu_runner(rs_model* m, int n_blocks, int block_size);

}  // namespace rs
