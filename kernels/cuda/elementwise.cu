#include <algorithm>
#include <cmath>
#include <numeric>

#include "elementwise.cuh"

namespace rsc {

namespace {

constexpr int kNT = 256;
inline unsigned capped_grid(int64_t n) { return (unsigned)std::min<int64_t>(grid_for(n, kNT), 65535LL * 32); }

__global__ void embedding_fwd_kernel(const float* __restrict__ table, int D, const int32_t* __restrict__ ids, int T,
                                     float* __restrict__ out) {
  const int t = blockIdx.x;
  const float* src = table + (int64_t)ids[t] * D;
  float* dst = out + (int64_t)t * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) dst[i] = src[i];
}

__global__ void embedding_bwd_kernel(const float* __restrict__ dout, int D, const int32_t* __restrict__ uniq,
                                     const int32_t* __restrict__ starts, const int32_t* __restrict__ order, float* __restrict__ dtable) {
  const int u = blockIdx.x, i = blockIdx.y * blockDim.x + threadIdx.x;
  if (i >= D) return;
  float* row = dtable + (int64_t)uniq[u] * D;
  float acc = row[i];
  for (int j = starts[u]; j < starts[u + 1]; j++) acc += dout[(int64_t)order[j] * D + i];
  row[i] = acc;
}

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(0.0f - g)); }

__global__ void swiglu_fwd_kernel(const float* __restrict__ gate, const float* __restrict__ up, int64_t ld_in, float* __restrict__ h,
                                  int64_t ld_out, int rows, int64_t width) {
  const int64_t n = (int64_t)rows * width;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / width, i = e % width;
    const float g = gate[r * ld_in + i];
    const float sg = sigmoid(g);
    h[r * ld_out + i] = __fmul_rn(__fmul_rn(g, sg), up[r * ld_in + i]);
  }
}

__global__ void swiglu_bwd_kernel(const float* __restrict__ dh, int64_t ld_h, const float* __restrict__ gate,
                                  const float* __restrict__ up, int64_t ld_in, float* __restrict__ dgate, float* __restrict__ dup,
                                  int64_t ld_g, int rows, int64_t width) {
  const int64_t n = (int64_t)rows * width;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / width, i = e % width;
    const float g = gate[r * ld_in + i], u = up[r * ld_in + i], d = dh[r * ld_h + i];
    const float sg = sigmoid(g);
    // Written without contractions, in the CPU backend's order.
    const float dsilu = __fmul_rn(sg, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sg))));
    dup[r * ld_g + i] = __fmul_rn(d, __fmul_rn(g, sg));
    dgate[r * ld_g + i] = __fmul_rn(__fmul_rn(d, u), dsilu);
  }
}

// Rotates the first rd dims of each head of hd (partial RoPE when rd < hd; the rest pass through).
__global__ void rope_kernel(float* __restrict__ x, int T, int ld, int nh, int hd, int rd, const int32_t* __restrict__ pos,
                            const float* __restrict__ cs, const float* __restrict__ sn, int inverse) {
  const int half = rd / 2;
  const int64_t n = (int64_t)T * nh * half;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = e / ((int64_t)nh * half);
    const int rem = (int)(e % ((int64_t)nh * half)), h = rem / half, i = rem % half;
    float* v = x + t * ld + (int64_t)h * hd;
    const int64_t ti = (int64_t)pos[t] * half + i;
    const float c = cs[ti], s = sn[ti], a = v[i], b = v[i + half];
    // No fma contraction: the same rounding as the CPU backend (built with -ffp-contract=off).
    if (!inverse) {
      v[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
      v[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    } else {
      v[i] = __fadd_rn(__fmul_rn(a, c), __fmul_rn(b, s));
      v[i + half] = __fsub_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
  }
}

__global__ void gather_rows_kernel(const float* __restrict__ src, int64_t ld_src, const int32_t* __restrict__ idx, int D,
                                   float* __restrict__ dst) {
  const int r = blockIdx.x;
  const float* s = src + (int64_t)idx[r] * ld_src;
  float* d = dst + (int64_t)r * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) d[i] = s[i];
}

__global__ void scatter_rows_kernel(const float* __restrict__ src, int D, const int32_t* __restrict__ idx, float* __restrict__ dst,
                                    int64_t ld_dst) {
  const int r = blockIdx.x;
  const float* s = src + (int64_t)r * D;
  float* d = dst + (int64_t)idx[r] * ld_dst;
  for (int i = threadIdx.x; i < D; i += blockDim.x) d[i] = s[i];
}

}  // namespace

void embedding_fwd(cudaStream_t s, const float* table, int D, const int32_t* ids, int T, float* out) {
  if (T <= 0) return;
  embedding_fwd_kernel<<<T, kNT, 0, s>>>(table, D, ids, T, out);
  check_launch("embedding_fwd_kernel", s);
}

void EmbeddingBwdPlan::build(const int32_t* ids, int T, cudaStream_t s) {
  order.resize(T);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [ids](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  uniq.clear();
  starts.clear();
  for (int j = 0; j < T; j++) {
    if (j == 0 || ids[order[j]] != ids[order[j - 1]]) {
      uniq.push_back(ids[order[j]]);
      starts.push_back(j);
    }
  }
  starts.push_back(T);
  std::vector<int32_t> all;
  all.reserve(uniq.size() + starts.size() + order.size());
  all.insert(all.end(), uniq.begin(), uniq.end());
  all.insert(all.end(), starts.begin(), starts.end());
  all.insert(all.end(), order.begin(), order.end());
  upload(dev, all.data(), all.size(), s, "embedding backward plan");
}

void embedding_bwd(cudaStream_t s, const float* dout, int D, const EmbeddingBwdPlan& plan, float* dtable) {
  const int U = (int)plan.uniq.size();
  if (U == 0) return;
  const int32_t* uniq = plan.dev.p;
  const int32_t* starts = uniq + U;
  const int32_t* order = starts + U + 1;
  embedding_bwd_kernel<<<dim3(U, grid_for(D, kNT)), kNT, 0, s>>>(dout, D, uniq, starts, order, dtable);
  check_launch("embedding_bwd_kernel", s);
}

void swiglu_fwd(cudaStream_t s, const float* gate, const float* up, int64_t ld_in, float* h, int64_t ld_out, int rows, int64_t width) {
  const int64_t n = (int64_t)rows * width;
  if (n <= 0) return;
  swiglu_fwd_kernel<<<capped_grid(n), kNT, 0, s>>>(gate, up, ld_in, h, ld_out, rows, width);
  check_launch("swiglu_fwd_kernel", s);
}

void swiglu_bwd(cudaStream_t s, const float* dh, int64_t ld_h, const float* gate, const float* up, int64_t ld_in, float* dgate,
                float* dup, int64_t ld_g, int rows, int64_t width) {
  const int64_t n = (int64_t)rows * width;
  if (n <= 0) return;
  swiglu_bwd_kernel<<<capped_grid(n), kNT, 0, s>>>(dh, ld_h, gate, up, ld_in, dgate, dup, ld_g, rows, width);
  check_launch("swiglu_bwd_kernel", s);
}

void RopeTable::ensure(int positions, int head_dim, double rope_theta, cudaStream_t s) {
  if (head_dim == hd && rope_theta == theta && positions <= npos) return;
  if (head_dim != hd || rope_theta != theta) npos = 0;
  const int half = head_dim / 2;
  const int n = std::max(positions, std::min(2 * npos, 1 << 20));
  std::vector<float> inv(half);
  // Same float32 arithmetic as the CPU backend (and HF): inv_freq = 1 / theta^(2i/hd), angle = float(pos) * inv.
  const float theta_f = (float)rope_theta;
  for (int i = 0; i < half; i++) {
    const float e = (float)(2 * i) / (float)head_dim;
    const float pw = (float)std::pow((double)theta_f, (double)e);
    inv[i] = 1.0f / pw;
  }
  cos.resize((size_t)n * half);
  sin.resize((size_t)n * half);
  for (int p = 0; p < n; p++)
    for (int i = 0; i < half; i++) {
      const float a = (float)p * inv[i];
      cos[(size_t)p * half + i] = (float)std::cos((double)a);
      sin[(size_t)p * half + i] = (float)std::sin((double)a);
    }
  upload(dcos, cos.data(), cos.size(), s, "rope cos table");
  upload(dsin, sin.data(), sin.size(), s, "rope sin table");
  hd = head_dim;
  theta = rope_theta;
  npos = n;
}

void rope_apply(cudaStream_t s, float* x, int T, int ld, int n_heads, int hd, const int32_t* pos, const RopeTable& tab, bool inverse) {
  const int64_t n = (int64_t)T * n_heads * (tab.hd / 2);  // the table's width: the rotary dims of each head
  if (n <= 0) return;
  rope_kernel<<<capped_grid(n), kNT, 0, s>>>(x, T, ld, n_heads, hd, tab.hd, pos, tab.dcos.p, tab.dsin.p, inverse ? 1 : 0);
  check_launch(inverse ? "rope_kernel(inverse)" : "rope_kernel", s);
}

void gather_rows(cudaStream_t s, const float* src, int64_t ld_src, const int32_t* idx, int n, int D, float* dst) {
  if (n <= 0) return;
  gather_rows_kernel<<<n, kNT, 0, s>>>(src, ld_src, idx, D, dst);
  check_launch("gather_rows_kernel", s);
}

void scatter_rows(cudaStream_t s, const float* src, int n, int D, const int32_t* idx, float* dst, int64_t ld_dst) {
  if (n <= 0) return;
  scatter_rows_kernel<<<n, kNT, 0, s>>>(src, D, idx, dst, ld_dst);
  check_launch("scatter_rows_kernel", s);
}

}  // namespace rsc

// --------------------------------------------------------------------------------------- ABI entry points
using namespace rsc;

namespace {

int32_t check_ids(const char* what, const int32_t* ids, int32_t T, int32_t V, int32_t D, rs_error* err) {
  if (T < 1 || V < 1 || D < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: sizes must be positive (T=%d V=%d D=%d)", what, T, V, D);
  if (!ids) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: null ids", what);
  for (int32_t t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= V)
      return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: token id %d at index %d is outside the vocab [0, %d)", what, ids[t], t, V);
  return RS_OK;
}

int32_t rope_call(const char* what, const float* in, int32_t T, int32_t H, int32_t hd, const int32_t* positions, double theta, float* out,
                  bool inverse, rs_error* err) {
  if (T < 1 || H < 1 || hd < 2 || hd % 2)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: need T, heads >= 1 and an even head_dim (T=%d heads=%d head_dim=%d)", what, T, H, hd);
  if (!in || !out || !positions) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: null buffer", what);
  if (!(theta > 0)) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: theta must be > 0", what);
  int32_t maxp = 0;
  for (int32_t t = 0; t < T; t++) {
    if (positions[t] < 0 || positions[t] > (1 << 24))
      return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: position %d at index %d is out of range", what, positions[t], t);
    maxp = std::max(maxp, positions[t]);
  }
  return guard(err, what, [&] {
    require_device();
    cudaStream_t s = thread_stream();
    RopeTable tab;
    tab.ensure(maxp + 1, hd, theta, s);
    const size_t n = (size_t)T * H * hd;
    DevBuf<float> x;
    DevBuf<int32_t> pos;
    upload(x, in, n, s, "rope x");
    upload(pos, positions, (size_t)T, s, "rope positions");
    rope_apply(s, x.p, T, H * hd, H, hd, pos.p, tab, inverse);
    to_host(out, x.p, n * sizeof(float), s, "rope y");
  });
}

}  // namespace

extern "C" {

int32_t rs_embedding_fwd(const float* table, int32_t V, int32_t D, const int32_t* ids, int32_t T, float* out, rs_error* err) {
  if (int32_t st = check_ids("embedding_fwd", ids, T, V, D, err)) return st;
  if (!table || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "embedding_fwd: null buffer");
  return guard(err, "embedding_fwd", [&] {
    require_device();
    cudaStream_t s = thread_stream();
    DevBuf<float> tab, o;
    DevBuf<int32_t> di;
    upload(tab, table, (size_t)V * D, s, "embedding table");
    upload(di, ids, (size_t)T, s, "embedding ids");
    o.reserve((size_t)T * D, "embedding output");
    embedding_fwd(s, tab.p, D, di.p, T, o.p);
    to_host(out, o.p, sizeof(float) * (size_t)T * D, s, "embedding output");
  });
}

int32_t rs_embedding_bwd(const float* dout, const int32_t* ids, int32_t T, int32_t V, int32_t D, float* dtable, rs_error* err) {
  if (int32_t st = check_ids("embedding_bwd", ids, T, V, D, err)) return st;
  if (!dout || !dtable) return fail(err, RS_ERR_INVALID_ARGUMENT, "embedding_bwd: null buffer");
  return guard(err, "embedding_bwd", [&] {
    require_device();
    cudaStream_t s = thread_stream();
    DevBuf<float> g, tab;
    upload(g, dout, (size_t)T * D, s, "embedding dout");
    upload(tab, dtable, (size_t)V * D, s, "embedding dtable");
    EmbeddingBwdPlan plan;
    plan.build(ids, T, s);
    embedding_bwd(s, g.p, D, plan, tab.p);
    to_host(dtable, tab.p, sizeof(float) * (size_t)V * D, s, "embedding dtable");
  });
}

int32_t rs_swiglu_fwd(const float* gate, const float* up, int64_t n, float* h, rs_error* err) {
  if (n < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "swiglu_fwd: n must be positive (got %lld)", (long long)n);
  if (!gate || !up || !h) return fail(err, RS_ERR_INVALID_ARGUMENT, "swiglu_fwd: null buffer");
  return guard(err, "swiglu_fwd", [&] {
    require_device();
    cudaStream_t s = thread_stream();
    DevBuf<float> g, u, o;
    upload(g, gate, (size_t)n, s, "swiglu gate");
    upload(u, up, (size_t)n, s, "swiglu up");
    o.reserve((size_t)n, "swiglu h");
    swiglu_fwd(s, g.p, u.p, n, o.p, n, 1, n);
    to_host(h, o.p, sizeof(float) * (size_t)n, s, "swiglu h");
  });
}

int32_t rs_swiglu_bwd(const float* dh, const float* gate, const float* up, int64_t n, float* dgate, float* dup, rs_error* err) {
  if (n < 1) return fail(err, RS_ERR_INVALID_ARGUMENT, "swiglu_bwd: n must be positive (got %lld)", (long long)n);
  if (!dh || !gate || !up || !dgate || !dup) return fail(err, RS_ERR_INVALID_ARGUMENT, "swiglu_bwd: null buffer");
  return guard(err, "swiglu_bwd", [&] {
    require_device();
    cudaStream_t s = thread_stream();
    DevBuf<float> d, g, u, dg, du;
    upload(d, dh, (size_t)n, s, "swiglu dh");
    upload(g, gate, (size_t)n, s, "swiglu gate");
    upload(u, up, (size_t)n, s, "swiglu up");
    dg.reserve((size_t)n, "swiglu dgate");
    du.reserve((size_t)n, "swiglu dup");
    swiglu_bwd(s, d.p, n, g.p, u.p, n, dg.p, du.p, n, 1, n);
    to_host(dgate, dg.p, sizeof(float) * (size_t)n, s, "swiglu dgate");
    to_host(dup, du.p, sizeof(float) * (size_t)n, s, "swiglu dup");
  });
}

int32_t rs_rope_fwd(const float* x, int32_t T, int32_t H, int32_t hd, const int32_t* positions, double theta, float* y, rs_error* err) {
  return rope_call("rope_fwd", x, T, H, hd, positions, theta, y, false, err);
}

int32_t rs_rope_bwd(const float* dy, int32_t T, int32_t H, int32_t hd, const int32_t* positions, double theta, float* dx, rs_error* err) {
  return rope_call("rope_bwd", dy, T, H, hd, positions, theta, dx, true, err);
}

}  // extern "C"
