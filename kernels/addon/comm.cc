// The learner ranks' communicator (actors.learner.ranks): MPI collectives over float buffers, the pieces a
// data-parallel step with a ZeRO-1 optimizer needs (reduce-scatter of the gradient, all-gather of the parameters,
// an all-reduce of a few f64 statistics). Built with MPI when binding.gyp finds mpicc (RS_HAVE_MPI); without it
// every call but available() throws, naming why, and the rest of the addon is unchanged.
//
// The processes are started by mpirun (or srun): MPI_Init reads the job from its environment. Calls are
// synchronous on the JS thread: every rank blocks in the same collective, in the same order.
#include <napi.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#ifdef RS_HAVE_MPI
#include <dlfcn.h>
// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace {

#ifdef RS_HAVE_MPI

void check(Napi::Env env, int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Napi::Error::New(env, std::string("comm: ") + what + " failed: " + std::string(msg, len));
}

void need_init(Napi::Env env) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (!up || down) throw Napi::Error::New(env, "comm: call init() first (and not after finalize())");
}

// Counts per rank (JS array of non-negative integers), checked against the buffer it describes.
std::vector<int> counts_of(const Napi::Value& v, int size, size_t total, const char* what) {
  Napi::Env env = v.Env();
  if (!v.IsArray()) throw Napi::TypeError::New(env, std::string("comm: ") + what + ": counts must be an array");
  auto a = v.As<Napi::Array>();
  if ((int)a.Length() != size) throw Napi::RangeError::New(env, std::string("comm: ") + what + ": need one count per rank");
  std::vector<int> c(size);
  size_t sum = 0;
  for (int i = 0; i < size; i++) {
    const int64_t n = a.Get(i).As<Napi::Number>().Int64Value();
    if (n < 0 || n > INT32_MAX) throw Napi::RangeError::New(env, std::string("comm: ") + what + ": bad count");
    c[i] = (int)n;
    sum += (size_t)n;
  }
  if (sum != total) throw Napi::RangeError::New(env, std::string("comm: ") + what + ": counts do not sum to the full buffer");
  return c;
}

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

Napi::Value Init(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int up = 0;
  MPI_Initialized(&up);
  if (!up) {
    // Node loads this addon with RTLD_LOCAL; Open MPI's plugins look libmpi's symbols up globally.
    dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    int provided = 0;
    check(env, MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("rank", world_rank());
  o.Set("size", world_size());
  return o;
}

// reduceScatter(send: Float32Array [total], recv: Float32Array [counts[rank]], counts): recv = this rank's slice of
// the element-wise sum over ranks.
Napi::Value ReduceScatter(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  need_init(env);
  auto send = info[0].As<Napi::Float32Array>();
  auto recv = info[1].As<Napi::Float32Array>();
  const auto c = counts_of(info[2], world_size(), send.ElementLength(), "reduceScatter");
  if (recv.ElementLength() != (size_t)c[world_rank()]) throw Napi::RangeError::New(env, "comm: reduceScatter: recv is not this rank's count");
  check(env, MPI_Reduce_scatter(send.Data(), recv.Data(), c.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Reduce_scatter");
  return env.Undefined();
}

// allGather(send: Float32Array [counts[rank]], recv: Float32Array [total], counts): every rank's slice, in rank order.
Napi::Value AllGather(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  need_init(env);
  auto send = info[0].As<Napi::Float32Array>();
  auto recv = info[1].As<Napi::Float32Array>();
  const auto c = counts_of(info[2], world_size(), recv.ElementLength(), "allGather");
  if (send.ElementLength() != (size_t)c[world_rank()]) throw Napi::RangeError::New(env, "comm: allGather: send is not this rank's count");
  std::vector<int> displ(c.size(), 0);
  for (size_t i = 1; i < c.size(); i++) displ[i] = displ[i - 1] + c[i - 1];
  check(env, MPI_Allgatherv(send.Data(), (int)send.ElementLength(), MPI_FLOAT, recv.Data(), c.data(), displ.data(), MPI_FLOAT, MPI_COMM_WORLD),
        "MPI_Allgatherv");
  return env.Undefined();
}

// allReduceSum(values: Float64Array): in place, the sum over ranks.
Napi::Value AllReduceSum(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  need_init(env);
  auto v = info[0].As<Napi::Float64Array>();
  check(env, MPI_Allreduce(MPI_IN_PLACE, v.Data(), (int)v.ElementLength(), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  return env.Undefined();
}

// The bytes of any typed array (the learner's step plans travel as Uint8Array).
std::pair<void*, size_t> bytes_of(const Napi::Value& v) {
  auto a = v.As<Napi::TypedArray>();
  auto buf = a.ArrayBuffer();
  return {static_cast<uint8_t*>(buf.Data()) + a.ByteOffset(), a.ByteLength()};
}

int root_of(const Napi::CallbackInfo& info, size_t i) {
  const int root = info[i].IsUndefined() ? 0 : info[i].As<Napi::Number>().Int32Value();
  if (root < 0 || root >= world_size()) throw Napi::RangeError::New(info.Env(), "comm: root is not a rank of this communicator");
  return root;
}

// bcast(buf: TypedArray, root = 0): in place, every rank gets root's bytes (the buffers must be the same size).
Napi::Value Bcast(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  need_init(env);
  auto [data, n] = bytes_of(info[0]);
  if (n > (size_t)INT32_MAX) throw Napi::RangeError::New(env, "comm: bcast: over 2 GiB");
  check(env, MPI_Bcast(data, (int)n, MPI_BYTE, root_of(info, 1), MPI_COMM_WORLD), "MPI_Bcast");
  return env.Undefined();
}

// Non-blocking broadcasts, polled from JS (bcastBegin -> test until true): a rank waiting for rank 0's next step
// plan sleeps on a timer between polls instead of spinning in a blocking collective (Open MPI busy-polls), which
// would take a core from inference for as long as rank 0 waits for samples. The request keeps its buffer alive.
struct Pending {
  MPI_Request req;
  Napi::Reference<Napi::Value> keep;
};
std::map<int, Pending> pending;
int next_request = 1;

Napi::Value BcastBegin(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  need_init(env);
  auto [data, n] = bytes_of(info[0]);
  if (n > (size_t)INT32_MAX) throw Napi::RangeError::New(env, "comm: bcastBegin: over 2 GiB");
  MPI_Request req;
  check(env, MPI_Ibcast(data, (int)n, MPI_BYTE, root_of(info, 1), MPI_COMM_WORLD, &req), "MPI_Ibcast");
  const int id = next_request++;
  pending.emplace(id, Pending{req, Napi::Persistent(info[0])});
  return Napi::Number::New(env, id);
}

// test(id): true once the request has completed (it is then forgotten).
Napi::Value Test(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int id = info[0].As<Napi::Number>().Int32Value();
  auto it = pending.find(id);
  if (it == pending.end()) throw Napi::RangeError::New(env, "comm: test: no such request (already completed?)");
  int done = 0;
  check(env, MPI_Test(&it->second.req, &done, MPI_STATUS_IGNORE), "MPI_Test");
  if (done) pending.erase(it);
  return Napi::Boolean::New(env, done != 0);
}

// abort(code): ends every rank of the job (a rank that cannot go on must not leave the others blocked in a collective).
Napi::Value Abort(const Napi::CallbackInfo& info) {
  need_init(info.Env());
  MPI_Abort(MPI_COMM_WORLD, info[0].IsUndefined() ? 1 : info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

Napi::Value Barrier(const Napi::CallbackInfo& info) {
  need_init(info.Env());
  check(info.Env(), MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  return info.Env().Undefined();
}

Napi::Value Finalize(const Napi::CallbackInfo& info) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) MPI_Finalize();
  return info.Env().Undefined();
}

#endif

}  // namespace

#ifdef RS_HAVE_MPI
// ZeRO-1 on a model's own flat buffer (the model wrapper's reduceScatterGrads / allGatherParams), in place and in
// bounded pieces: one MPI_Reduce (into the slice's owner, in place there) and one MPI_Bcast (from it) per piece of
// at most kPiece floats of each rank's slice. MPI_Reduce_scatter and MPI_Allgatherv over the whole buffer would be
// one call each, but Open MPI's algorithms for them allocate temporary buffers of the whole buffer's size (measured
// by `rollstream bench learner`: a rank then peaked above one process with the whole optimizer state).
constexpr int kPiece = 1 << 20;

// Calls f(owner rank, first float, length) for every piece of at most kPiece floats of every rank's slice.
template <typename F>
void for_each_piece(const std::vector<int>& c, F&& f) {
  size_t start = 0;
  for (int r = 0; r < (int)c.size(); start += (size_t)c[r], r++)
    for (size_t at = start, end = start + (size_t)c[r]; at < end; at += kPiece) f(r, at, (int)std::min<size_t>(kPiece, end - at));
}

double comm_reduce_scatter_in_place(const Napi::Value& counts, float* buf, size_t n) {
  Napi::Env env = counts.Env();
  need_init(env);
  const auto c = counts_of(counts, world_size(), n, "reduceScatterGrads");
  const int me = world_rank();
  double sumsq = 0;
  for_each_piece(c, [&](int r, size_t at, int len) {
    check(env, MPI_Reduce(r == me ? MPI_IN_PLACE : buf + at, buf + at, len, MPI_FLOAT, MPI_SUM, r, MPI_COMM_WORLD), "MPI_Reduce");
    if (r == me)
      for (size_t i = at; i < at + (size_t)len; i++) sumsq += (double)buf[i] * (double)buf[i];
  });
  return sumsq;
}

void comm_all_gather_in_place(const Napi::Value& counts, float* buf, size_t n) {
  Napi::Env env = counts.Env();
  need_init(env);
  const auto c = counts_of(counts, world_size(), n, "allGatherParams");
  for_each_piece(c, [&](int r, size_t at, int len) { check(env, MPI_Bcast(buf + at, len, MPI_FLOAT, r, MPI_COMM_WORLD), "MPI_Bcast"); });
}
#else
double comm_reduce_scatter_in_place(const Napi::Value& counts, float*, size_t) {
  throw Napi::Error::New(counts.Env(), "comm: this build has no MPI (mpicc was not found when the addon was built)");
}
void comm_all_gather_in_place(const Napi::Value& counts, float*, size_t) {
  throw Napi::Error::New(counts.Env(), "comm: this build has no MPI (mpicc was not found when the addon was built)");
}
#endif

namespace {

#ifndef RS_HAVE_MPI

Napi::Value Unavailable(const Napi::CallbackInfo& info) {
  throw Napi::Error::New(info.Env(),
                         "comm: this build has no MPI (mpicc was not found when the addon was built): install openmpi-bin and "
                         "libopenmpi-dev, then rebuild the kernels");
}

#endif

}  // namespace

// Exported as the addon's `comm` object.
Napi::Object comm_exports(Napi::Env env) {
  Napi::Object o = Napi::Object::New(env);
#ifdef RS_HAVE_MPI
  o.Set("available", Napi::Boolean::New(env, true));
  o.Set("init", Napi::Function::New(env, Init));
  o.Set("reduceScatter", Napi::Function::New(env, ReduceScatter));
  o.Set("allGather", Napi::Function::New(env, AllGather));
  o.Set("allReduceSum", Napi::Function::New(env, AllReduceSum));
  o.Set("barrier", Napi::Function::New(env, Barrier));
  o.Set("bcast", Napi::Function::New(env, Bcast));
  o.Set("bcastBegin", Napi::Function::New(env, BcastBegin));
  o.Set("test", Napi::Function::New(env, Test));
  o.Set("abort", Napi::Function::New(env, Abort));
  o.Set("finalize", Napi::Function::New(env, Finalize));
#else
  o.Set("available", Napi::Boolean::New(env, false));
  for (const char* name : {"init", "reduceScatter", "allGather", "allReduceSum", "barrier", "bcast", "bcastBegin", "test", "abort", "finalize"})
    o.Set(name, Napi::Function::New(env, Unavailable));
#endif
  return o;
}
