#include <atomic>
#include <mutex>

#include "common.cuh"

namespace rsc {

void raise(int32_t code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  throw Failure{code, buf};
}

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear non-sticky errors so the next call starts clean
  if (e == cudaErrorMemoryAllocation) raise(RS_ERR_OUT_OF_MEMORY, "out of GPU memory in %s", what);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
    raise(RS_ERR_UNSUPPORTED, "no usable CUDA device in %s (%s)", what, cudaGetErrorString(e));
  raise(RS_ERR_INTERNAL, "CUDA error in %s: %s (%s)%s", what, cudaGetErrorString(e), cudaGetErrorName(e),
        sync_debug() ? "" : " [errors inside kernels surface at the next synchronisation; the cuda_sync setting names the kernel]");
}

namespace {
std::atomic<bool> g_sync{false};
}  // namespace

void set_sync_debug(bool on) { g_sync.store(on); }
bool sync_debug() { return g_sync.load(std::memory_order_relaxed); }

void check_launch(const char* kernel, cudaStream_t s) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) raise(RS_ERR_INTERNAL, "CUDA error launching kernel %s: %s", kernel, cudaGetErrorString(e));
  if (sync_debug()) {
    e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) raise(RS_ERR_INTERNAL, "CUDA error in kernel %s: %s", kernel, cudaGetErrorString(e));
  }
}

namespace {
std::once_flag g_probe_once;
int g_count = 0;
std::string g_reason;
void probe() {
  std::call_once(g_probe_once, [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      g_count = 0;
      g_reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    } else if (n < 1) {
      g_reason = "cudaGetDeviceCount found no device";
    } else {
      g_count = n;
    }
  });
}
}  // namespace

int device_count() {
  probe();
  return g_count;
}

std::string no_device_reason() {
  probe();
  return g_reason;
}

void require_device(int device) {
  if (device_count() < 1) raise(RS_ERR_UNSUPPORTED, "no CUDA device is visible (%s)", no_device_reason().c_str());
  if (device >= g_count) raise(RS_ERR_UNSUPPORTED, "CUDA device %d requested, %d visible", device, g_count);
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
}

void to_device(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), what);
}

void to_host(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), what);
  check_cuda(cudaStreamSynchronize(s), what);
}

void sync_stream(cudaStream_t s, const char* what) { check_cuda(cudaStreamSynchronize(s), what); }

void zero_async(void* dst, size_t bytes, cudaStream_t s, const char* what) {
  if (bytes == 0) return;
  check_cuda(cudaMemsetAsync(dst, 0, bytes, s), what);
}

// Never destroyed: a thread_local destructor would run during process exit, after the CUDA runtime may
// already be torn down. One stream per thread that ever runs a stand-alone kernel is a bounded cost.
static thread_local cudaStream_t tl_stream = nullptr;

cudaStream_t thread_stream() {
  if (!tl_stream) check_cuda(cudaStreamCreateWithFlags(&tl_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return tl_stream;
}

}  // namespace rsc
