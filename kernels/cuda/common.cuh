// Shared plumbing of the CUDA backend: errors (a C++ Failure thrown inside, turned into rs_error at every ABI
// entry point by guard()), device buffers, the per-thread stream of the stand-alone kernels, and the
// deterministic warp/block reductions every kernel uses.
//
// Error policy: nothing here aborts. Every CUDA runtime call goes through check_cuda(), every kernel launch is
// followed by check_launch("<kernel name>"), and every ABI call ends with a stream synchronisation whose error
// names the call. A fault inside a kernel surfaces at that synchronisation; rs_settings.cuda_sync = 1
// synchronises after every launch so the message names the exact kernel.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../kernels.h"
#include "../shared/errors.h"
#include "../shared/train_checks.h"

namespace rsc {

using bf16 = __nv_bfloat16;

struct Failure {
  int32_t code;
  std::string msg;
};

[[noreturn]] void raise(int32_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
using rs_shared::fail;
using rs_shared::ok;

// Throws Failure naming `what` when e != cudaSuccess (RS_ERR_OUT_OF_MEMORY for allocation failures).
void check_cuda(cudaError_t e, const char* what);
// After a kernel launch: reports launch errors (bad configuration, ...) with the kernel's name; with
// rs_settings.cuda_sync also synchronises so faults inside the kernel are attributed to it.
void check_launch(const char* kernel, cudaStream_t s);
bool sync_debug();
void set_sync_debug(bool on);

// Number of visible devices (0 when there is no driver or no GPU; never throws).
int device_count();
// Why device_count() is 0, for messages ("" when a device is visible).
std::string no_device_reason();
// Selects the device on the calling thread; throws Failure(RS_ERR_UNSUPPORTED) when no device is visible.
void require_device(int device = 0);

// Runs f() and converts what it throws into an rs_error prefixed by the ABI function's name.
template <class F>
int32_t guard(rs_error* err, const char* fn, F&& f) {
  try {
    f();
    return ok(err);
  } catch (const Failure& e) {
    return fail(err, e.code, "%s: %s", fn, e.msg.c_str());
  } catch (const std::bad_alloc&) {
    return fail(err, RS_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  } catch (const std::exception& e) {
    return fail(err, RS_ERR_INTERNAL, "%s: %s", fn, e.what());
  }
}

// Owning device allocation; contents are not preserved by resize().
template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), n(o.n) {
    o.p = nullptr;
    o.n = 0;
  }
  ~DevBuf() { release(); }
  void release() {
    if (p) cudaFree(p);  // errors ignored: nothing useful to do in a destructor
    p = nullptr;
    n = 0;
  }
  // Grows to at least count elements (never shrinks). `what` names the buffer in the out-of-memory message.
  void reserve(size_t count, const char* what) {
    if (count <= n && p) return;
    release();
    void* q = nullptr;
    const size_t bytes = (count > 0 ? count : 1) * sizeof(T);
    cudaError_t e = cudaMalloc(&q, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the (non-sticky) allocation error
      raise(RS_ERR_OUT_OF_MEMORY, "out of GPU memory allocating %s (%.1f MiB): %s", what, bytes / 1048576.0,
            cudaGetErrorString(e));
    }
    p = static_cast<T*>(q);
    n = count;
  }
};

// Host <-> device copies on stream s (pageable host memory: the calls return once the host side is done).
void to_device(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what);
void to_host(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what);
void sync_stream(cudaStream_t s, const char* what);
void zero_async(void* dst, size_t bytes, cudaStream_t s, const char* what);

// Uploads a host array into a freshly sized device buffer (nothing when src is null).
template <class T>
T* upload(DevBuf<T>& buf, const T* src, size_t count, cudaStream_t s, const char* what) {
  if (!src) return nullptr;
  buf.reserve(count, what);
  to_device(buf.p, src, count * sizeof(T), s, what);
  return buf.p;
}

// The stream the stand-alone kernels of the calling thread run on (created on first use).
cudaStream_t thread_stream();

inline unsigned grid_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

// ------------------------------------------------------------------------------------- device helpers
// Butterfly reductions: every lane ends with the bit-identical result (IEEE addition is commutative), and
// the order is fixed, so results do not depend on timing.
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// sh: 32 elements of shared memory, free for reuse once the function returns.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* sh) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();  // a previous call may still be reading sh
  if (lane == 0) sh[w] = v;
  __syncthreads();
  T r = lane < nw ? sh[lane] : T(0);
  return warp_sum(r);
}

__device__ __forceinline__ float block_max(float v, float* sh) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  float r = lane < nw ? sh[lane] : -INFINITY;
  return warp_max(r);
}

}  // namespace rsc
