// The learner ranks' collectives on the CUDA backend: NCCL, found with dlopen() at first use and never linked or
// included at build time (no nccl.h is needed, as cublas_loader.cu does for cuBLAS). The few functions and types we
// use are declared here from NCCL's public ABI (nccl.h, stable since 2.x): ncclUniqueId is 128 bytes, ncclComm_t an
// opaque pointer, ncclDataType_t / ncclRedOp_t / ncclResult_t plain ints.
//
// The C ABI (rs_nccl_*, declared in nccl.cuh, exported with the rest of rs_*) mirrors the MPI one of the addon
// (kernels/addon/comm.cc): a reduce-scatter of the f32 gradient, an all-gather of the f32 parameters, an all-reduce
// of a few f64 statistics. NCCL's reduce-scatter and all-gather take equal counts per rank: the caller pads the flat
// buffer to a multiple of the rank count. Rank 0 makes the unique id (rs_nccl_unique_id) and hands its 128 bytes
// to the other ranks (over the ranks' MPI communicator, or the run's KV), every rank then calls rs_nccl_init.
// Library search: the path given to rs_nccl_set_lib, then libnccl.so.2, libnccl.so (a process that imported torch has
// one loaded). No environment variable: kernel settings come through the C ABI.
// rs_nccl_selftest runs the three collectives on device buffers and checks them (kernels/gpu-check/nccl_check.py).
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "adamw.cuh"
#include "model.cuh"
#include "nccl.cuh"

namespace {

// nccl.h, spelled as its C ABI.
struct ncclUniqueId {
  char internal[128];
};
using ncclComm_t = void*;
constexpr int ncclSuccess = 0;
constexpr int ncclFloat32 = 7, ncclFloat64 = 8;  // ncclDataType_t
constexpr int ncclSum = 0;                       // ncclRedOp_t

using get_unique_id_fn = int (*)(ncclUniqueId* id);
using comm_init_rank_fn = int (*)(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
using reduce_scatter_fn = int (*)(const void* send, void* recv, size_t recvcount, int datatype, int op, ncclComm_t comm, cudaStream_t stream);
using all_gather_fn = int (*)(const void* send, void* recv, size_t sendcount, int datatype, ncclComm_t comm, cudaStream_t stream);
using all_reduce_fn = int (*)(const void* send, void* recv, size_t count, int datatype, int op, ncclComm_t comm, cudaStream_t stream);
using reduce_fn = int (*)(const void* send, void* recv, size_t count, int datatype, int op, int root, ncclComm_t comm, cudaStream_t stream);
using broadcast_fn = int (*)(const void* send, void* recv, size_t count, int datatype, int root, ncclComm_t comm, cudaStream_t stream);
using group_fn = int (*)();
using comm_destroy_fn = int (*)(ncclComm_t comm);
using get_error_string_fn = const char* (*)(int result);
using get_version_fn = int (*)(int* version);

struct Lib {
  void* handle = nullptr;
  std::string file, why;
  get_unique_id_fn get_unique_id = nullptr;
  comm_init_rank_fn comm_init_rank = nullptr;
  reduce_scatter_fn reduce_scatter = nullptr;
  all_gather_fn all_gather = nullptr;
  all_reduce_fn all_reduce = nullptr;
  reduce_fn reduce = nullptr;
  broadcast_fn broadcast = nullptr;
  group_fn group_start = nullptr, group_end = nullptr;
  comm_destroy_fn comm_destroy = nullptr;
  get_error_string_fn error_string = nullptr;
  get_version_fn get_version = nullptr;
};

std::once_flag g_once;
std::mutex g_path_mu;
std::string g_path;       // rs_nccl_set_lib
bool g_loading = false;  // set_lib after the first load would not be the library in use
Lib g_lib;
thread_local std::string g_error;

void load() {
  std::call_once(g_once, [] {
    std::vector<std::string> names;
    {
      std::lock_guard<std::mutex> g(g_path_mu);
      g_loading = true;
      if (!g_path.empty()) names.push_back(g_path);
    }
    names.emplace_back("libnccl.so.2");
    names.emplace_back("libnccl.so");
    std::string tried;
    for (const std::string& n : names) {
      void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        tried += (tried.empty() ? "" : "; ") + n;
        continue;
      }
      Lib l;
      l.handle = h;
      l.file = n;
      l.get_unique_id = reinterpret_cast<get_unique_id_fn>(dlsym(h, "ncclGetUniqueId"));
      l.comm_init_rank = reinterpret_cast<comm_init_rank_fn>(dlsym(h, "ncclCommInitRank"));
      l.reduce_scatter = reinterpret_cast<reduce_scatter_fn>(dlsym(h, "ncclReduceScatter"));
      l.all_gather = reinterpret_cast<all_gather_fn>(dlsym(h, "ncclAllGather"));
      l.all_reduce = reinterpret_cast<all_reduce_fn>(dlsym(h, "ncclAllReduce"));
      l.reduce = reinterpret_cast<reduce_fn>(dlsym(h, "ncclReduce"));
      l.broadcast = reinterpret_cast<broadcast_fn>(dlsym(h, "ncclBroadcast"));
      l.group_start = reinterpret_cast<group_fn>(dlsym(h, "ncclGroupStart"));
      l.group_end = reinterpret_cast<group_fn>(dlsym(h, "ncclGroupEnd"));
      l.comm_destroy = reinterpret_cast<comm_destroy_fn>(dlsym(h, "ncclCommDestroy"));
      l.error_string = reinterpret_cast<get_error_string_fn>(dlsym(h, "ncclGetErrorString"));
      l.get_version = reinterpret_cast<get_version_fn>(dlsym(h, "ncclGetVersion"));
      if (!l.get_unique_id || !l.comm_init_rank || !l.reduce_scatter || !l.all_gather || !l.all_reduce || !l.reduce || !l.broadcast ||
          !l.group_start || !l.group_end || !l.comm_destroy || !l.error_string) {
        tried += (tried.empty() ? "" : "; ") + n + " (missing symbols)";
        dlclose(h);
        continue;
      }
      g_lib = l;
      return;
    }
    g_lib.why = "cannot load NCCL (tried " + tried + "; give libnccl.so.2's path to rs_nccl_set_lib)";
  });
}

int fail(const std::string& what) {
  g_error = what;
  return 1;
}

// 0, or 1 with the error kept for rs_nccl_last_error.
int nccl(int rc, const char* what) {
  if (rc == ncclSuccess) return 0;
  return fail(std::string(what) + " failed: " + (g_lib.error_string ? g_lib.error_string(rc) : "error " + std::to_string(rc)));
}

int cuda(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return 0;
  return fail(std::string(what) + " failed: " + cudaGetErrorString(rc));
}

int need_lib() {
  load();
  return g_lib.handle ? 0 : fail(g_lib.why);
}

// Checks the slices of a model's flat buffer: one non-negative count per rank, summing to its parameters.
int check_counts(const rs_model* m, const int64_t* counts, int32_t nranks) {
  if (!m || !counts || nranks < 1) return fail("rs_nccl_model_*: null model or counts, or nranks < 1");
  int64_t sum = 0;
  for (int32_t r = 0; r < nranks; r++) {
    if (counts[r] < 0) return fail("rs_nccl_model_*: a negative count");
    sum += counts[r];
  }
  return sum == m->n_params ? 0 : fail("rs_nccl_model_*: the counts do not sum to the model's parameters");
}

// One collective per rank's slice of buf, grouped (NCCL's reduce-scatter and all-gather need equal counts).
int per_slice(void* comm, rs_model* m, float* buf, const int64_t* counts, int32_t nranks, bool reduce) {
  if (nccl(g_lib.group_start(), "ncclGroupStart")) return 1;
  int64_t off = 0;
  int rc = 0;
  for (int32_t r = 0; r < nranks && !rc; off += counts[r], r++) {
    float* slice = buf + off;
    rc = reduce ? nccl(g_lib.reduce(slice, slice, (size_t)counts[r], ncclFloat32, ncclSum, r, comm, m->stream), "ncclReduce")
                : nccl(g_lib.broadcast(slice, slice, (size_t)counts[r], ncclFloat32, r, comm, m->stream), "ncclBroadcast");
  }
  const int end = nccl(g_lib.group_end(), "ncclGroupEnd");
  return rc || end;
}

// Runs f (which may throw rsc::Failure) and turns a failure into 1 with the reason kept.
template <typename F>
int guarded(const char* what, F&& f) {
  try {
    return f();
  } catch (const rsc::Failure& e) {
    return fail(std::string(what) + ": " + e.msg);
  }
}

}  // namespace

extern "C" {

/** The libnccl to load before the default names: 0, or 1 once a load has already happened (kept for rs_nccl_last_error). */
RS_NCCL_API int32_t rs_nccl_set_lib(const char* path) {
  std::lock_guard<std::mutex> g(g_path_mu);
  if (g_loading) return fail("rs_nccl_set_lib: NCCL was already looked up; set the library before any other rs_nccl_* call");
  g_path = path ? path : "";
  return 0;
}

RS_NCCL_API int32_t rs_nccl_available(void) {
  return need_lib() == 0 ? 1 : 0;
}

RS_NCCL_API const char* rs_nccl_describe(void) {
  static thread_local std::string s;
  load();
  if (!g_lib.handle) return (s = "none (" + g_lib.why + ")").c_str();
  int v = 0;
  if (g_lib.get_version) g_lib.get_version(&v);
  s = "nccl " + std::to_string(v) + " (" + g_lib.file + ")";
  return s.c_str();
}

RS_NCCL_API const char* rs_nccl_last_error(void) {
  return g_error.c_str();
}

RS_NCCL_API int32_t rs_nccl_unique_id(uint8_t* out128) {
  if (need_lib()) return 1;
  ncclUniqueId id;
  if (nccl(g_lib.get_unique_id(&id), "ncclGetUniqueId")) return 1;
  std::memcpy(out128, id.internal, sizeof id.internal);
  return 0;
}

RS_NCCL_API int32_t rs_nccl_init(void** comm, int32_t nranks, const uint8_t* id128, int32_t rank, int32_t device) {
  if (need_lib()) return 1;
  if (nranks < 1 || rank < 0 || rank >= nranks) return fail("rs_nccl_init: rank must be in [0, nranks)");
  if (cuda(cudaSetDevice(device), "cudaSetDevice")) return 1;
  ncclUniqueId id;
  std::memcpy(id.internal, id128, sizeof id.internal);
  return nccl(g_lib.comm_init_rank(comm, nranks, id, rank), "ncclCommInitRank");
}

RS_NCCL_API int32_t rs_nccl_reduce_scatter_f32(void* comm, const float* send, float* recv, uint64_t recvcount, void* stream) {
  if (need_lib()) return 1;
  return nccl(g_lib.reduce_scatter(send, recv, recvcount, ncclFloat32, ncclSum, comm, static_cast<cudaStream_t>(stream)), "ncclReduceScatter");
}

RS_NCCL_API int32_t rs_nccl_all_gather_f32(void* comm, const float* send, float* recv, uint64_t sendcount, void* stream) {
  if (need_lib()) return 1;
  return nccl(g_lib.all_gather(send, recv, sendcount, ncclFloat32, comm, static_cast<cudaStream_t>(stream)), "ncclAllGather");
}

RS_NCCL_API int32_t rs_nccl_all_reduce_sum_f64(void* comm, double* buf, uint64_t count, void* stream) {
  if (need_lib()) return 1;
  return nccl(g_lib.all_reduce(buf, buf, count, ncclFloat64, ncclSum, comm, static_cast<cudaStream_t>(stream)), "ncclAllReduce");
}

RS_NCCL_API int32_t rs_nccl_destroy(void* comm) {
  if (need_lib()) return 1;
  return nccl(g_lib.comm_destroy(comm), "ncclCommDestroy");
}

RS_NCCL_API int32_t rs_nccl_model_reduce_scatter_grads(void* comm, rs_model* m, const int64_t* counts, int32_t nranks, int32_t rank,
                                                       double* sumsq) {
  if (need_lib() || check_counts(m, counts, nranks)) return 1;
  if (rank < 0 || rank >= nranks || !sumsq) return fail("rs_nccl_model_reduce_scatter_grads: rank outside [0, nranks) or null sumsq");
  return guarded("rs_nccl_model_reduce_scatter_grads", [&] {
    rsc::model_enter(m);  // a host-written gradient goes first
    if (per_slice(comm, m, m->G(), counts, nranks, true)) return 1;
    int64_t off = 0;
    for (int32_t r = 0; r < rank; r++) off += counts[r];
    *sumsq = rsc::grad_sumsq(m->stream, m->G() + off, counts[rank], m->norm_part, m->norm_host);  // synchronises the stream
    rsc::model_touched(m, rsc::kGrads);
    return 0;
  });
}

RS_NCCL_API int32_t rs_nccl_model_all_gather_params(void* comm, rs_model* m, const int64_t* counts, int32_t nranks) {
  if (need_lib() || check_counts(m, counts, nranks)) return 1;
  return guarded("rs_nccl_model_all_gather_params", [&] {
    rsc::model_enter(m);
    if (per_slice(comm, m, m->P(), counts, nranks, false)) return 1;
    if (cuda(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize")) return 1;
    rsc::model_touched(m, rsc::kParams);
    m->bf16_stale = true;
    return 0;
  });
}

// The three collectives on device buffers of `per_rank` floats per rank, checked against their exact values (every
// value a small integer, so any order of summation is exact). *max_err gets the largest absolute error.
RS_NCCL_API int32_t rs_nccl_selftest(void* comm, int32_t nranks, int32_t rank, uint64_t per_rank, double* max_err) {
  const size_t total = per_rank * (size_t)nranks;
  std::vector<float> host(total);
  for (size_t i = 0; i < total; i++) host[i] = (float)((i % 97) + rank);  // rank r's gradient
  float *send = nullptr, *slice = nullptr, *gathered = nullptr;
  double* stats = nullptr;
  auto cleanup = [&] {
    cudaFree(send);
    cudaFree(slice);
    cudaFree(gathered);
    cudaFree(stats);
  };
  if (cuda(cudaMalloc(&send, total * 4), "cudaMalloc") || cuda(cudaMalloc(&slice, per_rank * 4), "cudaMalloc") ||
      cuda(cudaMalloc(&gathered, total * 4), "cudaMalloc") || cuda(cudaMalloc(&stats, 2 * 8), "cudaMalloc")) {
    cleanup();
    return 1;
  }
  const double st[2] = {1.0 + rank, 0.5};
  int rc = cuda(cudaMemcpy(send, host.data(), total * 4, cudaMemcpyHostToDevice), "cudaMemcpy") ||
           cuda(cudaMemcpy(stats, st, 16, cudaMemcpyHostToDevice), "cudaMemcpy") || rs_nccl_reduce_scatter_f32(comm, send, slice, per_rank, nullptr) ||
           rs_nccl_all_gather_f32(comm, slice, gathered, per_rank, nullptr) || rs_nccl_all_reduce_sum_f64(comm, stats, 2, nullptr) ||
           cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<float> out(total);
  double got[2] = {0, 0};
  if (!rc) rc = cuda(cudaMemcpy(out.data(), gathered, total * 4, cudaMemcpyDeviceToHost), "cudaMemcpy") || cuda(cudaMemcpy(got, stats, 16, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cleanup();
  if (rc) return 1;
  // The sum over ranks r of (i % 97) + r, everywhere, after the reduce-scatter and all-gather round trip.
  double err = 0;
  const double rank_sum = nranks * (nranks - 1) / 2.0;
  for (size_t i = 0; i < total; i++) err = std::fmax(err, std::fabs(out[i] - ((double)(i % 97) * nranks + rank_sum)));
  err = std::fmax(err, std::fabs(got[0] - (nranks + rank_sum)));
  err = std::fmax(err, std::fabs(got[1] - 0.5 * nranks));
  *max_err = err;
  return 0;
}

}  // extern "C"
