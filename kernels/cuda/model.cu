// Model lifecycle: config checks, the flat parameter layout (see kernels.h), deterministic init on the GPU,
// host mirrors, accessors.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "cublas_loader.cuh"
#include "model.cuh"

namespace rsc {

int host_threads();  // library.cu

namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// N(0, 1) keyed by (seed, index): the CPU backend's Box-Muller on two hashed uniforms, in double. The device's
// log/cos may differ from glibc's in the last bit of the double, which changes the rounded float only in
// rare ties: the init matches the CPU backend's to within one float ulp, not necessarily bit for bit.
__device__ __forceinline__ float normal_at(uint64_t seed, uint64_t i) {
  const uint64_t a = splitmix64(seed ^ splitmix64(2 * i + 1)), b = splitmix64(seed ^ splitmix64(2 * i + 2));
  const double u1 = ((a >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
  const double u2 = (b >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

__global__ void init_normal_kernel(float* __restrict__ p, int64_t n, uint64_t seed, int64_t base, float std_) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    p[i] = std_ * normal_at(seed, (uint64_t)(base + i));
}

__global__ void fill_kernel(float* __restrict__ p, int64_t n, float v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}

unsigned capped(int64_t n) { return (unsigned)std::min<int64_t>(grid_for(n, 256), 65535LL * 16); }

int32_t check_config(const rs_model_config* c, rs_error* err) {
  if (const int32_t st = rs_shared::check_model_config(c, err)) return st;
  // GPU kernel limits (the CPU backend has none): head dim and the query heads per kv head (decode).
  const int hd = c->head_dim > 0 ? c->head_dim : c->hidden_size / c->num_heads;
  if (hd > 256) return fail(err, RS_ERR_UNSUPPORTED, "model config: head dim %d is above the CUDA backend's 256", hd);
  if (c->num_heads / c->num_kv_heads > 32)
    return fail(err, RS_ERR_UNSUPPORTED, "model config: %d query heads per kv head is above the CUDA backend's 32",
                c->num_heads / c->num_kv_heads);
  return RS_OK;
}

// Tears down what create made, ignoring errors (the context may already be broken).
void destroy(rs_model* m) {
  if (!m) return;
  cudaSetDevice(m->device);
  if (m->stream) cudaStreamSynchronize(m->stream);
  cudaGetLastError();
  if (m->gemm.cublas) cublas::destroy_handle(m->gemm.cublas);
  for (auto& mi : m->mirror) std::free(mi.host);
  if (m->stream) cudaStreamDestroy(m->stream);
  cudaGetLastError();
  delete m;  // DevBuf destructors free the device memory
}

}  // namespace

void Acts::ensure(const Dims& d, int T) {
  if (moe.size() != (size_t)d.L) moe.resize(d.L);
  if (T <= cap) return;
  const int64_t D = d.D, QKV = d.QKV, A = (int64_t)d.H * d.hd, I = d.I, H = d.H;
  const int64_t QK = d.qkn ? A + (int64_t)d.KV * d.hd : 0, QKR = d.qkn ? H + d.KV : 0;  // q/k norm inputs, rstds
  const int64_t per_layer = D + 1 + QKV + A + H + D + D + 1 + 2 * I + I + QK + QKR;
  const int64_t per_token = (int64_t)(d.L + 1) * D + d.L * per_layer + D + 1 + D + D + D + QKV + A + 2 * I + I + H;
  const int newcap = std::max(T, std::min(2 * cap, 1 << 24));
  cap = 0;
  buf.reserve((size_t)(per_token * newcap), "activations");
  float* p = buf.p;
  auto take = [&](int64_t width) {
    float* r = p;
    p += width * newcap;
    return r;
  };
  X.assign(d.L + 1, nullptr);
  for (auto& x : X) x = take(D);
  layers.assign(d.L, Layer{});
  for (auto& l : layers) {
    l.ln1 = take(D);
    l.rstd1 = take(1);
    l.qkv = take(QKV);
    l.att = take(A);
    l.lse = take(H);
    l.xmid = take(D);
    l.ln2 = take(D);
    l.rstd2 = take(1);
    l.gu = take(2 * I);
    l.hm = take(I);
    l.qk_raw = QK ? take(QK) : nullptr;
    l.qk_rstd = QKR ? take(QKR) : nullptr;
  }
  lnf = take(D);
  rstdf = take(1);
  tmpD = take(D);
  dres = take(D);
  dln = take(D);
  dqkv = take(QKV);
  datt = take(A);
  dgu = take(2 * I);
  dhm = take(I);
  delta = take(H);
  ints.reserve((size_t)2 * newcap, "token arrays");
  tokens = ints.p;
  pos = ints.p + newcap;
  cap = newcap;
}

void ensure_moments(rs_model* m) {
  if (m->bufs[kAdamM].p && m->bufs[kAdamV].p) return;
  for (int k = kAdamM; k <= kAdamV; k++) {
    m->bufs[k].reserve((size_t)m->opt_count, k == kAdamM ? "AdamW m" : "AdamW v");
    zero_async(m->bufs[k].p, sizeof(float) * (size_t)std::max<int64_t>(m->opt_count, 1), m->stream, "zeroing the AdamW moments");
  }
  sync_stream(m->stream, "allocating the AdamW moments");
}

void model_enter(rs_model* m) {
  check_cuda(cudaSetDevice(m->device), "cudaSetDevice");
  for (int k = 0; k < 4; k++) {
    Mirror& mi = m->mirror[k];
    if (!mi.dirty) continue;
    to_device(m->bufs[k].p, mi.host, sizeof(float) * (size_t)m->len(k), m->stream, "uploading a host-written model buffer");
    mi.dirty = false;
    mi.valid = true;
    if (k == kParams) m->bf16_stale = true;
  }
  if (m->gemm.mode == MathMode::BF16 && m->bf16_stale) {
    to_bf16(m->stream, m->P(), m->n_params, m->params_bf16.p);
    m->bf16_stale = false;
  }
}


void prepare_row(rs_model* m, const int32_t* tokens, int T, const int32_t* seg, int S, const int32_t* parent) {
  m->acts.ensure(m->d, T);
  m->row.build(seg, parent, S, T);
  m->rope.ensure(std::min(m->d.maxPos, std::max(m->row.max_pos + 1, 64)), m->d.rd, m->d.theta, m->stream);
  to_device(m->acts.tokens, tokens, sizeof(int32_t) * (size_t)T, m->stream, "tokens");
  to_device(m->acts.pos, m->row.pos.data(), sizeof(int32_t) * (size_t)T, m->stream, "positions");
  attention_tiles(seg, S, m->row, m->tiles_host, m->prefix_host);
  upload(m->acts.tiles, m->tiles_host.data(), m->tiles_host.size(), m->stream, "attention tiles");
  upload(m->acts.prefix, m->prefix_host.data(), m->prefix_host.size(), m->stream, "attention prefixes");
  m->acts.n_tiles = (int)m->tiles_host.size();
}

int head_chunk_rows(const Dims& d) { return (int)std::max<int64_t>(64, std::min<int64_t>(4096, (1LL << 28) / d.V)); }

}  // namespace rsc

using namespace rsc;

extern "C" {

rs_model* rs_model_create(const rs_model_config* cfg, uint64_t seed, rs_error* err) {
  if (check_config(cfg, err)) return nullptr;
  rs_model* m = new (std::nothrow) rs_model();
  if (!m) {
    fail(err, RS_ERR_OUT_OF_MEMORY, "model: out of memory");
    return nullptr;
  }
  const int32_t st = guard(err, "model_create", [&] {
    require_device(0);
    m->device = 0;
    m->cfg = *cfg;
    m->cfg.moe_layers = nullptr;  // the caller's array: read now, never kept
    m->d = rs_shared::dims_of(*cfg);
    const Dims& d = m->d;
    m->threads = cfg->threads > 0 ? cfg->threads : host_threads();
    rs_shared::build_layout(m, rs_shared::moe_layer_flags(*cfg));

    check_cuda(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    m->gemm.stream = m->stream;
    if (cublas::available()) {
      try {
        m->gemm.cublas = cublas::create_handle(m->stream);
      } catch (const Failure& f) {
        std::fprintf(stderr, "rollstream cuda: %s; the model uses its own (slower) matmul kernels\n", f.msg.c_str());
        m->gemm.cublas = nullptr;
      }
    }
    // rs_settings.cuda_matmul; by default bf16 tensor-core matmuls when cuBLAS is there, exact fp32 with our own kernels otherwise.
    m->gemm.mode = model_math_mode(m->gemm.cublas != nullptr);

    const size_t n = (size_t)m->n_params;
    const char* names[4] = {"params", "grads", "AdamW m", "AdamW v"};
    // The AdamW moments are allocated at their first use (ensure_moments): a ZeRO-1 rank that shards them first never
    // holds the whole optimizer state, and a model that only generates never holds any.
    for (int k = 0; k < 2; k++) m->bufs[k].reserve(n, names[k]);
    if (m->gemm.mode == MathMode::BF16) m->params_bf16.reserve(n, "bf16 params");
    zero_async(m->bufs[1].p, n * sizeof(float), m->stream, "zeroing model buffers");
    m->opt_count = m->n_params;

    // Init: N(0, 0.02) for matrices, scaled by 1/sqrt(2L) for o_proj and down_proj; ones for norms; zeros for biases.
    const double out_scale = 1.0 / std::sqrt(2.0 * d.L);
    for (const rs_tensor_info& t : m->tensors) {
      float* p = m->P() + t.offset;
      const std::string name = t.name;
      if (t.ndim == 1) {
        fill_kernel<<<capped(t.size), 256, 0, m->stream>>>(p, t.size, name.find("bias") != std::string::npos ? 0.f : 1.f);
        check_launch("fill_kernel", m->stream);
        continue;
      }
      const bool out_proj = name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
      const float std_ = (float)(0.02 * (out_proj ? out_scale : 1.0));
      init_normal_kernel<<<capped(t.size), 256, 0, m->stream>>>(p, t.size, seed, t.offset, std_);
      check_launch("init_normal_kernel", m->stream);
    }
    m->bf16_stale = true;
    sync_stream(m->stream, "model init");
  });
  if (st != RS_OK) {
    destroy(m);
    return nullptr;
  }
  return m;
}

void rs_model_free(rs_model* m) { destroy(m); }
int64_t rs_model_num_params(const rs_model* m) { return m ? m->n_params : 0; }
int32_t rs_model_num_tensors(const rs_model* m) { return m ? (int32_t)m->tensors.size() : 0; }
int32_t rs_model_threads(const rs_model* m) { return m ? m->threads : 0; }
int32_t rs_model_set_threads(rs_model* m, int32_t threads, rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "set_threads: null model");
  if (threads < 0 || threads > 4096) return fail(err, RS_ERR_INVALID_ARGUMENT, "set_threads: threads must be in [0, 4096] (got %d)", threads);
  m->threads = threads > 0 ? threads : host_threads();
  return RS_OK;
}

int32_t rs_model_tensor_info(const rs_model* m, int32_t index, rs_tensor_info* out, rs_error* err) {
  if (!m || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "tensor_info: null argument");
  if (index < 0 || index >= (int32_t)m->tensors.size())
    return fail(err, RS_ERR_INVALID_ARGUMENT, "tensor_info: index %d outside [0, %d)", index, (int32_t)m->tensors.size());
  *out = m->tensors[index];
  return ok(err);
}

}  // extern "C"

namespace {
// The getters cannot report errors: on failure (host or device) they return null, and the next model call
// reports the CUDA error.
float* mirror_get(rs_model* m, int k) {
  if (!m) return nullptr;
  Mirror& mi = m->mirror[k];
  try {
    check_cuda(cudaSetDevice(m->device), "cudaSetDevice");
    if (k >= kAdamM) ensure_moments(m);
    if (!mi.host) {
      mi.host = static_cast<float*>(std::malloc(sizeof(float) * (size_t)std::max<int64_t>(1, m->len(k))));
      if (!mi.host) return nullptr;
      mi.valid = false;
    }
    if (!mi.valid && !mi.dirty) {
      to_host(mi.host, m->bufs[k].p, sizeof(float) * (size_t)m->len(k), m->stream, "downloading a model buffer");
      mi.valid = true;
    }
  } catch (const Failure& f) {
    std::fprintf(stderr, "rollstream cuda: reading a model buffer failed: %s\n", f.msg.c_str());
    return nullptr;
  }
  mi.dirty = true;
  return mi.host;
}
}  // namespace

extern "C" {

float* rs_model_params(rs_model* m) { return mirror_get(m, kParams); }
float* rs_model_grads(rs_model* m) { return mirror_get(m, kGrads); }
float* rs_model_adam_m(rs_model* m) { return mirror_get(m, kAdamM); }
float* rs_model_adam_v(rs_model* m) { return mirror_get(m, kAdamV); }
int64_t rs_model_step_count(const rs_model* m) { return m ? m->step : 0; }
void rs_model_set_step_count(rs_model* m, int64_t step) {
  if (m && step >= 0) m->step = step;
}

int32_t rs_model_buffer_ranges(rs_model* m, int32_t kind, int32_t write, const int64_t* off, const int64_t* size, int32_t n, float* values,
                               rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "buffer_ranges: null model");
  int64_t total = 0;
  if (int32_t st = rs_shared::check_buffer_ranges(m->n_params, kind, write, off, size, n, values, &total, err)) return st;
  if (int32_t st = rs_shared::check_moment_ranges(kind, off, size, n, m->opt_offset, m->opt_count, err)) return st;
  return guard(err, "buffer_ranges", [&] {
    model_enter(m);  // a host copy written through a getter goes first, whole; then these ranges
    if (kind >= kAdamM) ensure_moments(m);
    Mirror& mi = m->mirror[kind];
    const int64_t base = kind < 2 ? 0 : m->opt_offset;  // the moments' flat offsets start at their slice
    int64_t at = 0;
    for (int32_t i = 0; i < n; at += size[i], i++) {
      const size_t bytes = sizeof(float) * (size_t)size[i];
      const int64_t o = off[i] - base;
      if (write) {
        to_device(m->bufs[kind].p + o, values + at, bytes, m->stream, "buffer_ranges upload");
        if (mi.host && mi.valid && mi.host + o != values + at) std::memcpy(mi.host + o, values + at, bytes);  // the host copy stays current
      } else {
        to_host(values + at, m->bufs[kind].p + o, bytes, m->stream, "buffer_ranges download");
      }
    }
    if (write && kind == kParams) m->bf16_stale = true;  // the next model call refreshes the bf16 copy
    sync_stream(m->stream, "buffer_ranges");
  });
}

// LoRA dropout is not implemented on this backend: dropout 0 (no correction) is accepted and its correction gradient
// is zero, dropout > 0 is refused (the CPU backend, kernels/cpu/lora.cpp, implements it).
int32_t rs_model_set_lora(rs_model* m, const rs_lora_spec* spec, rs_error* err) {
  if (!m || !spec) return fail(err, RS_ERR_INVALID_ARGUMENT, "set_lora: null argument");
  if (spec->dropout > 0.f)
    return fail(err, RS_ERR_UNSUPPORTED, "model.lora.dropout > 0 is not implemented on the CUDA backend: set it to 0 or train on the CPU backend");
  if (spec->n_adapters < 0) return fail(err, RS_ERR_INVALID_ARGUMENT, "set_lora: n_adapters < 0");
  m->lora_adapters = spec->n_adapters;
  return ok(err);
}

int32_t rs_model_lora_grads(rs_model* m, float* out, int64_t n, rs_error* err) {
  if (!m || (!out && n > 0)) return fail(err, RS_ERR_INVALID_ARGUMENT, "lora_grads: null argument");
  if (n != m->lora_adapters)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "lora_grads: %lld values asked, the LoRA spec has %lld", (long long)n, (long long)m->lora_adapters);
  if (n > 0) std::memset(out, 0, sizeof(float) * (size_t)n);
  return ok(err);
}

void rs_model_zero_grad(rs_model* m) {
  if (!m) return;
  Mirror& mi = m->mirror[kGrads];
  mi.dirty = false;  // whatever the caller wrote is zeroed anyway
  if (cudaSetDevice(m->device) != cudaSuccess || cudaMemsetAsync(m->G(), 0, sizeof(float) * (size_t)m->n_params, m->stream) != cudaSuccess ||
      cudaStreamSynchronize(m->stream) != cudaSuccess) {
    mi.valid = false;  // the error stays sticky (or recurs) and is reported by the next model call
    return;
  }
  if (mi.host) {
    std::memset(mi.host, 0, sizeof(float) * (size_t)m->n_params);
    mi.valid = true;
  } else {
    mi.valid = false;
  }
}

}  // extern "C"
