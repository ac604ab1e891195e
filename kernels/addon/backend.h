// A kernels backend (librollstream_cpu.so, later librollstream_cuda.so) opened with dlopen() and its C ABI
// resolved with dlsym() into a function table. The addon never links the math.
#pragma once
#include <string>

#include "../kernels.h"

#define RS_BACKEND_FUNCS(X)                                                                                            \
  X(rs_abi_version) X(rs_backend_info) X(rs_device_count) X(rs_set_num_threads) X(rs_set_settings) X(rs_get_settings) \
  X(rs_set_test_hooks)                                                                                               \
  X(rs_embedding_fwd) X(rs_embedding_bwd) X(rs_rmsnorm_fwd) X(rs_rmsnorm_bwd) X(rs_residual_rmsnorm_fwd)             \
  X(rs_residual_rmsnorm_bwd) X(rs_sgemm) X(rs_matmul_fwd) X(rs_matmul_bwd) X(rs_rope_fwd) X(rs_rope_bwd)             \
  X(rs_attention_fwd) X(rs_attention_bwd) X(rs_swiglu_fwd) X(rs_swiglu_bwd) X(rs_loss_fwd_bwd) X(rs_grad_norm)      \
  X(rs_adamw) X(rs_model_create) X(rs_model_free) X(rs_model_num_params) X(rs_model_num_tensors)                    \
  X(rs_model_tensor_info) X(rs_model_threads) X(rs_model_set_threads) X(rs_model_params) X(rs_model_grads) X(rs_model_adam_m)                \
  X(rs_model_adam_v) X(rs_model_buffer_ranges) X(rs_model_step_count) X(rs_model_set_step_count) X(rs_model_forward)                           \
  X(rs_model_train_micro) X(rs_model_step) X(rs_model_zero_grad) X(rs_model_generate) X(rs_model_set_lora)          \
  X(rs_model_lora_grads) X(rs_model_shard_optimizer) X(rs_model_optimizer_shard) X(rs_model_shard_step)            \
  X(rs_engine_create) X(rs_engine_free) X(rs_engine_add) X(rs_engine_cancel) X(rs_engine_set_version) X(rs_engine_step)   \
  X(rs_engine_get_stats)

// The CUDA backend's NCCL collectives (kernels/cuda/nccl.cuh), resolved when the library has them (all or none):
// the learner ranks' ZeRO-1 on the model's device buffers. The CPU backend has none; its ranks use MPI (comm.cc).
struct NcclFns {
  int32_t (*available)(void) = nullptr;
  const char* (*describe)(void) = nullptr;
  const char* (*last_error)(void) = nullptr;
  int32_t (*unique_id)(uint8_t* out128) = nullptr;
  int32_t (*init)(void** comm, int32_t nranks, const uint8_t* id128, int32_t rank, int32_t device) = nullptr;
  int32_t (*model_reduce_scatter_grads)(void* comm, rs_model* model, const int64_t* counts, int32_t nranks, int32_t rank, double* sumsq) = nullptr;
  int32_t (*model_all_gather_params)(void* comm, rs_model* model, const int64_t* counts, int32_t nranks) = nullptr;
};

struct Backend {
  void* handle = nullptr;
  std::string path;
  NcclFns nccl;
#define RS_DECLARE_FN(name) decltype(&::name) name = nullptr;
  RS_BACKEND_FUNCS(RS_DECLARE_FN)
#undef RS_DECLARE_FN
};

// Opens (once per path, kept for the life of the process) and checks the ABI version. Throws std::runtime_error
// naming the path and the missing piece.
Backend* open_backend(const std::string& path);

// NCCL communicators made by a backend's ncclInit, by handle (small integers handed to JS).
int nccl_handle_put(void* comm);
void* nccl_handle_get(int handle);
