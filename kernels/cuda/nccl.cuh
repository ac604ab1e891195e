// The learner ranks' NCCL collectives (nccl.cu): NCCL is loaded with dlopen at first use, so the CUDA library builds
// without nccl.h and loads on machines without libnccl. Not part of kernels.h: the CPU backend's ranks use MPI
// through the addon (kernels/addon/comm.cc). Every function returns 0 on success, else 1 with rs_nccl_last_error()
// saying why (on the calling thread).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "../kernels.h"

#define RS_NCCL_API __attribute__((visibility("default")))

extern "C" {
// 1 when libnccl loaded (RS_NCCL_LIB, libnccl.so.2, libnccl.so), else 0.
// The libnccl to load first (before libnccl.so.2, libnccl.so); only before any other rs_nccl_* call.
RS_NCCL_API int32_t rs_nccl_set_lib(const char* path);
RS_NCCL_API int32_t rs_nccl_available(void);
// "nccl <version> (<file>)" or "none (<why>)".
RS_NCCL_API const char* rs_nccl_describe(void);
RS_NCCL_API const char* rs_nccl_last_error(void);
// Rank 0: the communicator's 128-byte id, for every rank's rs_nccl_init.
RS_NCCL_API int32_t rs_nccl_unique_id(uint8_t* out128);
// Every rank, with rank 0's id, on its device.
RS_NCCL_API int32_t rs_nccl_init(void** comm, int32_t nranks, const uint8_t* id128, int32_t rank, int32_t device);
// Device buffers; stream null = the default stream. send holds recvcount * nranks floats.
RS_NCCL_API int32_t rs_nccl_reduce_scatter_f32(void* comm, const float* send, float* recv, uint64_t recvcount, void* stream);
// recv holds sendcount * nranks floats, rank r's at r * sendcount.
RS_NCCL_API int32_t rs_nccl_all_gather_f32(void* comm, const float* send, float* recv, uint64_t sendcount, void* stream);
RS_NCCL_API int32_t rs_nccl_all_reduce_sum_f64(void* comm, double* buf, uint64_t count, void* stream);
RS_NCCL_API int32_t rs_nccl_destroy(void* comm);
// ZeRO-1 on a model's own device buffers (kernels/zero1.ts), the flat buffer split in counts[nranks] contiguous slices
// (rank r's from the sum of the counts before it; uneven counts: one ncclReduce / ncclBroadcast per slice in a group).
// The reduce-scatter leaves the sum over ranks of this rank's slice of the grads in place and *sumsq its sum of
// squares; the all-gather broadcasts each rank's slice of the params to every rank. Both on the model's stream.
RS_NCCL_API int32_t rs_nccl_model_reduce_scatter_grads(void* comm, rs_model* model, const int64_t* counts, int32_t nranks, int32_t rank,
                                                       double* sumsq);
RS_NCCL_API int32_t rs_nccl_model_all_gather_params(void* comm, rs_model* model, const int64_t* counts, int32_t nranks);
// The three collectives on device buffers, checked against exact values; *max_err the largest absolute error.
RS_NCCL_API int32_t rs_nccl_selftest(void* comm, int32_t nranks, int32_t rank, uint64_t per_rank, double* max_err);
}
