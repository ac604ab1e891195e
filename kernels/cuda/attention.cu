#include <algorithm>
#include <cmath>

#include "attention.cuh"

namespace rsc {

namespace {

constexpr int kWarps = 4, kRowsPerWarp = kAttnRows / kWarps, kThreads = 32 * kWarps;
static_assert(kRowsPerWarp * kWarps == kAttnRows, "rows per block");

// Shared-memory footprints (floats): staged rows of the block's own tile [16][hd] (broadcast reads) and
// 32-row tiles of the other side [32][hd + 1] (the +1 keeps lane-per-row reads conflict-free).
size_t fwd_smem(int hd) { return sizeof(float) * ((size_t)kAttnRows * hd + 2 * 32 * (size_t)(hd + 1)); }
size_t bwd_dq_smem(int hd) { return sizeof(float) * (2 * (size_t)kAttnRows * hd + 2 * 32 * (size_t)(hd + 1)); }
size_t bwd_dkv_smem(int hd) { return sizeof(float) * (2 * (size_t)kAttnRows * hd + 2 * 32 * (size_t)(hd + 1) + 64); }

template <int DPL>
__global__ void __launch_bounds__(kThreads) attn_fwd_kernel(AttnArgs a, float scale, float* __restrict__ out, float* __restrict__ lse) {
  extern __shared__ float sm[];
  const int hd = a.hd, ks = hd + 1;
  float* Qs = sm;                  // [16][hd]
  float* Ks = Qs + kAttnRows * hd;  // [32][hd + 1]
  float* Vs = Ks + 32 * ks;         // [32][hd + 1]
  const int4 tile = a.tiles[blockIdx.x];
  const int r0 = tile.x, r1 = tile.y, b = tile.z;
  const int h = blockIdx.y, kvh = h / (a.H / a.KV);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, row0 = warp * kRowsPerWarp;
  for (int e = threadIdx.x; e < kAttnRows * hd; e += kThreads) {
    const int r = e / hd, d = e - r * hd, i = r0 + r;
    Qs[e] = i < r1 ? a.q[(int64_t)i * a.ldq + (int64_t)h * hd + d] : 0.f;
  }
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][DPL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int u = 0; u < DPL; u++) acc[r][u] = 0.f;
  }
  // This warp's last query row (-1 when it has none: every tile is skipped).
  const int last_row = r0 + row0 < r1 ? min(r1, r0 + row0 + kRowsPerWarp) - 1 : -1;

  // Pass 0: the parent's keys (group-prefix packing), all visible; pass 1: the segment's own keys, causal.
  const int2 pre = a.prefix ? a.prefix[blockIdx.x] : make_int2(0, 0);
  for (int pass = 0; pass < 2; pass++) {
    const bool causal = pass == 1;
    const int kb = causal ? b : pre.x, ke = causal ? r1 : pre.y;
    for (int k0 = kb; k0 < ke; k0 += 32) {
      __syncthreads();  // the previous tile is no longer read (and Qs is complete on the first pass)
      for (int e = threadIdx.x; e < 32 * hd; e += kThreads) {
        const int j = e / hd, d = e - j * hd, key = k0 + j;
        const bool in = key < ke;
        Ks[j * ks + d] = in ? a.k[(int64_t)key * a.ldk + (int64_t)kvh * hd + d] : 0.f;
        Vs[j * ks + d] = in ? a.v[(int64_t)key * a.ldv + (int64_t)kvh * hd + d] : 0.f;
      }
      __syncthreads();
      if (last_row < 0 || (causal && k0 > last_row)) continue;  // every key of this tile comes after every query of this warp

      float s[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; r++) s[r] = 0.f;
      const float* kr = Ks + lane * ks;
      for (int d = 0; d < hd; d++) {
        const float kv = kr[d];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; r++) s[r] = fmaf(Qs[(row0 + r) * hd + d], kv, s[r]);
      }
      const int j = k0 + lane;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; r++) {
        const int i = r0 + row0 + r;
        if (i >= r1 || (causal && k0 > i)) continue;  // warp-uniform
        const bool valid = causal ? j <= i : j < ke;
        const float sc = valid ? s[r] * scale : -INFINITY;
        const float mn = fmaxf(m[r], warp_max(sc));  // finite: key k0 is valid
        const float corr = expf(m[r] - mn);          // 0 on the first tile (m = -inf)
        const float p = valid ? expf(sc - mn) : 0.f;
        l[r] = l[r] * corr + warp_sum(p);
#pragma unroll
        for (int u = 0; u < DPL; u++) acc[r][u] *= corr;
        const int nj = causal ? min(32, i - k0 + 1) : min(32, ke - k0);
        for (int jj = 0; jj < nj; jj++) {
          const float pj = __shfl_sync(kFull, p, jj);
#pragma unroll
          for (int u = 0; u < DPL; u++) {
            const int d = lane + 32 * u;
            if (d < hd) acc[r][u] = fmaf(pj, Vs[jj * ks + d], acc[r][u]);
          }
        }
        m[r] = mn;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int i = r0 + row0 + r;
    if (i >= r1) continue;
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int u = 0; u < DPL; u++) {
      const int d = lane + 32 * u;
      if (d < hd) out[(int64_t)i * a.ldo + (int64_t)h * hd + d] = acc[r][u] * inv;
    }
    if (lane == 0) lse[(int64_t)i * a.H + h] = m[r] + logf(l[r]);
  }
}

// Pass 1: per query tile and head: delta = dO . O, p = exp(s * scale - lse), dq = scale * sum_j p (dO . v_j - delta) k_j.
template <int DPL>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_dq_kernel(AttnArgs a, float scale, const float* __restrict__ out, const float* __restrict__ lse, const float* __restrict__ dout,
                       float* __restrict__ dq, float* __restrict__ delta) {
  extern __shared__ float sm[];
  const int hd = a.hd, ks = hd + 1;
  float* Qs = sm;                    // [16][hd]
  float* dOs = Qs + kAttnRows * hd;  // [16][hd]
  float* Ks = dOs + kAttnRows * hd;  // [32][hd + 1]
  float* Vs = Ks + 32 * ks;          // [32][hd + 1]
  const int4 tile = a.tiles[blockIdx.x];
  const int r0 = tile.x, r1 = tile.y, b = tile.z;
  const int h = blockIdx.y, kvh = h / (a.H / a.KV);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, row0 = warp * kRowsPerWarp;
  for (int e = threadIdx.x; e < kAttnRows * hd; e += kThreads) {
    const int r = e / hd, d = e - r * hd, i = r0 + r;
    const bool in = i < r1;
    Qs[e] = in ? a.q[(int64_t)i * a.ldq + (int64_t)h * hd + d] : 0.f;
    dOs[e] = in ? dout[(int64_t)i * a.ldo + (int64_t)h * hd + d] : 0.f;
  }
  __syncthreads();
  float dl[kRowsPerWarp], lr[kRowsPerWarp], acc[kRowsPerWarp][DPL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int i = r0 + row0 + r;
    float p = 0.f;
    if (i < r1)
#pragma unroll
      for (int u = 0; u < DPL; u++) {
        const int d = lane + 32 * u;
        if (d < hd) p = fmaf(dOs[(row0 + r) * hd + d], out[(int64_t)i * a.ldo + (int64_t)h * hd + d], p);
      }
    dl[r] = warp_sum(p);
    lr[r] = i < r1 ? lse[(int64_t)i * a.H + h] : 0.f;
    if (lane == 0 && i < r1) delta[(int64_t)i * a.H + h] = dl[r];
#pragma unroll
    for (int u = 0; u < DPL; u++) acc[r][u] = 0.f;
  }
  const int last_row = r0 + row0 < r1 ? min(r1, r0 + row0 + kRowsPerWarp) - 1 : -1;

  const int2 pre = a.prefix ? a.prefix[blockIdx.x] : make_int2(0, 0);
  for (int pass = 0; pass < 2; pass++) {  // the parent's keys (all visible), then the segment's own (causal)
    const bool causal = pass == 1;
    const int kb = causal ? b : pre.x, ke = causal ? r1 : pre.y;
    for (int k0 = kb; k0 < ke; k0 += 32) {
      __syncthreads();
      for (int e = threadIdx.x; e < 32 * hd; e += kThreads) {
        const int j = e / hd, d = e - j * hd, key = k0 + j;
        const bool in = key < ke;
        Ks[j * ks + d] = in ? a.k[(int64_t)key * a.ldk + (int64_t)kvh * hd + d] : 0.f;
        Vs[j * ks + d] = in ? a.v[(int64_t)key * a.ldv + (int64_t)kvh * hd + d] : 0.f;
      }
      __syncthreads();
      if (last_row < 0 || (causal && k0 > last_row)) continue;

      float s[kRowsPerWarp], dp[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; r++) s[r] = dp[r] = 0.f;
      const float* kr = Ks + lane * ks;
      const float* vr = Vs + lane * ks;
      for (int d = 0; d < hd; d++) {
        const float kv = kr[d], vv = vr[d];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; r++) {
          s[r] = fmaf(Qs[(row0 + r) * hd + d], kv, s[r]);
          dp[r] = fmaf(dOs[(row0 + r) * hd + d], vv, dp[r]);
        }
      }
      const int j = k0 + lane;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; r++) {
        const int i = r0 + row0 + r;
        if (i >= r1 || (causal && k0 > i)) continue;  // warp-uniform
        const bool valid = causal ? j <= i : j < ke;
        const float p = valid ? expf(s[r] * scale - lr[r]) : 0.f;
        const float ds = p * (dp[r] - dl[r]);
        const int nj = causal ? min(32, i - k0 + 1) : min(32, ke - k0);
        for (int jj = 0; jj < nj; jj++) {
          const float dsj = __shfl_sync(kFull, ds, jj);
#pragma unroll
          for (int u = 0; u < DPL; u++) {
            const int d = lane + 32 * u;
            if (d < hd) acc[r][u] = fmaf(dsj, Ks[jj * ks + d], acc[r][u]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int i = r0 + row0 + r;
    if (i >= r1) continue;
#pragma unroll
    for (int u = 0; u < DPL; u++) {
      const int d = lane + 32 * u;
      if (d < hd) dq[(int64_t)i * a.ldq + (int64_t)h * hd + d] = acc[r][u] * scale;
    }
  }
}

// Pass 2: per key tile and kv head, over the query heads of its group and then the queries that read each key
// (the rest of its segment, and for a parent's keys every child after it: tile.w is the end of those): dv = sum p dO, dk = scale * sum p (dO . v - delta) q.
template <int DPL>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_dkv_kernel(AttnArgs a, float scale, const float* __restrict__ lse, const float* __restrict__ dout,
                        const float* __restrict__ delta, float* __restrict__ dk, float* __restrict__ dv) {
  extern __shared__ float sm[];
  const int hd = a.hd, ks = hd + 1;
  float* Kt = sm;                   // [16][hd]: this block's keys
  float* Vt = Kt + kAttnRows * hd;  // [16][hd]
  float* Qs = Vt + kAttnRows * hd;  // [32][hd + 1]: a tile of queries
  float* dOs = Qs + 32 * ks;        // [32][hd + 1]
  float* lse_s = dOs + 32 * ks;     // [32]
  float* dl_s = lse_s + 32;         // [32]
  const int4 tile = a.tiles[blockIdx.x];
  const int r0 = tile.x, r1 = tile.y, e_seg = tile.w;
  const int kvh = blockIdx.y, group = a.H / a.KV;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, row0 = warp * kRowsPerWarp;
  for (int e = threadIdx.x; e < kAttnRows * hd; e += kThreads) {
    const int r = e / hd, d = e - r * hd, j = r0 + r;
    const bool in = j < r1;
    Kt[e] = in ? a.k[(int64_t)j * a.ldk + (int64_t)kvh * hd + d] : 0.f;
    Vt[e] = in ? a.v[(int64_t)j * a.ldv + (int64_t)kvh * hd + d] : 0.f;
  }
  float accK[kRowsPerWarp][DPL], accV[kRowsPerWarp][DPL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++)
#pragma unroll
    for (int u = 0; u < DPL; u++) accK[r][u] = accV[r][u] = 0.f;
  const int first_key = r0 + row0;  // this warp's first key (>= r1 when the warp has none)

  for (int hh = 0; hh < group; hh++) {
    const int h = kvh * group + hh;
    for (int q0 = r0; q0 < e_seg; q0 += 32) {
      __syncthreads();
      for (int e = threadIdx.x; e < 32 * hd; e += kThreads) {
        const int r = e / hd, d = e - r * hd, i = q0 + r;
        const bool in = i < e_seg;
        Qs[r * ks + d] = in ? a.q[(int64_t)i * a.ldq + (int64_t)h * hd + d] : 0.f;
        dOs[r * ks + d] = in ? dout[(int64_t)i * a.ldo + (int64_t)h * hd + d] : 0.f;
      }
      if (threadIdx.x < 32) {
        const int i = q0 + threadIdx.x;
        lse_s[threadIdx.x] = i < e_seg ? lse[(int64_t)i * a.H + h] : 0.f;
        dl_s[threadIdx.x] = i < e_seg ? delta[(int64_t)i * a.H + h] : 0.f;
      }
      __syncthreads();
      if (first_key >= r1 || q0 + 31 < first_key) continue;  // no keys, or every query precedes every key

      float s[kRowsPerWarp], dp[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; r++) s[r] = dp[r] = 0.f;
      const float* qr = Qs + lane * ks;
      const float* orow = dOs + lane * ks;
      for (int d = 0; d < hd; d++) {
        const float qv = qr[d], ov = orow[d];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; r++) {
          s[r] = fmaf(qv, Kt[(row0 + r) * hd + d], s[r]);
          dp[r] = fmaf(ov, Vt[(row0 + r) * hd + d], dp[r]);
        }
      }
      const int i = q0 + lane;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; r++) {
        const int j = first_key + r;
        if (j >= r1 || q0 + 31 < j) continue;  // warp-uniform
        const bool valid = i < e_seg && i >= j;
        const float p = valid ? expf(s[r] * scale - lse_s[lane]) : 0.f;
        const float ds = p * (dp[r] - dl_s[lane]);
        const int i0 = max(0, j - q0), i1 = min(32, e_seg - q0);
        for (int ii = i0; ii < i1; ii++) {
          const float pi = __shfl_sync(kFull, p, ii), dsi = __shfl_sync(kFull, ds, ii);
#pragma unroll
          for (int u = 0; u < DPL; u++) {
            const int d = lane + 32 * u;
            if (d < hd) {
              accV[r][u] = fmaf(pi, dOs[ii * ks + d], accV[r][u]);
              accK[r][u] = fmaf(dsi, Qs[ii * ks + d], accK[r][u]);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int j = first_key + r;
    if (j >= r1) continue;
#pragma unroll
    for (int u = 0; u < DPL; u++) {
      const int d = lane + 32 * u;
      if (d < hd) {
        dk[(int64_t)j * a.ldk + (int64_t)kvh * hd + d] = accK[r][u] * scale;
        dv[(int64_t)j * a.ldv + (int64_t)kvh * hd + d] = accV[r][u];
      }
    }
  }
}

// Decode: block (sequence b, kv head), one warp per query head of the group; lane j scores key j0 + j.
template <int DPL>
__global__ void attn_decode_kernel(const float* __restrict__ q, int ldq, const float* __restrict__ kc, const float* __restrict__ vc,
                                   int KVD, const int32_t* __restrict__ base, const int32_t* __restrict__ nkeys, int H, int KV, int hd,
                                   float scale, float* __restrict__ out, int ldo) {
  extern __shared__ float qs_all[];  // [group][hd]
  const int b = blockIdx.x, kvh = blockIdx.y, group = H / KV;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, h = kvh * group + warp;
  float* qs = qs_all + warp * hd;
  for (int d = lane; d < hd; d += 32) qs[d] = q[(int64_t)b * ldq + (int64_t)h * hd + d];
  __syncwarp();
  const int n = nkeys[b];
  const float* K = kc + (int64_t)base[b] * KVD + (int64_t)kvh * hd;
  const float* V = vc + (int64_t)base[b] * KVD + (int64_t)kvh * hd;
  float m = -INFINITY, l = 0.f, acc[DPL];
#pragma unroll
  for (int u = 0; u < DPL; u++) acc[u] = 0.f;
  for (int j0 = 0; j0 < n; j0 += 32) {
    const int j = j0 + lane;
    const bool valid = j < n;
    float s = 0.f;
    if (valid) {
      const float* kr = K + (int64_t)j * KVD;
      for (int d = 0; d < hd; d++) s = fmaf(qs[d], kr[d], s);
    }
    const float sc = valid ? s * scale : -INFINITY;
    const float mn = fmaxf(m, warp_max(sc));  // finite: key j0 is valid
    const float corr = expf(m - mn);
    const float p = valid ? expf(sc - mn) : 0.f;
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int u = 0; u < DPL; u++) acc[u] *= corr;
    const int nj = min(32, n - j0);
    for (int jj = 0; jj < nj; jj++) {
      const float pj = __shfl_sync(kFull, p, jj);
      const float* vr = V + (int64_t)(j0 + jj) * KVD;
#pragma unroll
      for (int u = 0; u < DPL; u++) {
        const int d = lane + 32 * u;
        if (d < hd) acc[u] = fmaf(pj, vr[d], acc[u]);
      }
    }
    m = mn;
  }
  const float inv = 1.0f / l;
#pragma unroll
  for (int u = 0; u < DPL; u++) {
    const int d = lane + 32 * u;
    if (d < hd) out[(int64_t)b * ldo + (int64_t)h * hd + d] = acc[u] * inv;
  }
}

template <class K>
void allow_smem(K kernel, size_t bytes, const char* name) {
  if (bytes > 48 * 1024) check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), name);
}

int dims_per_lane(int hd) {
  if (hd <= 32) return 1;
  if (hd <= 64) return 2;
  if (hd <= 128) return 4;
  if (hd <= 256) return 8;
  raise(RS_ERR_UNSUPPORTED, "attention: head_dim %d is above the supported 256", hd);
}

template <int DPL>
void fwd_impl(cudaStream_t s, const AttnArgs& a, float* out, float* lse) {
  const size_t smem = fwd_smem(a.hd);
  allow_smem(attn_fwd_kernel<DPL>, smem, "attn_fwd_kernel smem");
  attn_fwd_kernel<DPL><<<dim3(a.n_tiles, a.H), kThreads, smem, s>>>(a, 1.0f / sqrtf((float)a.hd), out, lse);
  check_launch("attn_fwd_kernel", s);
}

template <int DPL>
void bwd_impl(cudaStream_t s, const AttnArgs& a, const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv,
              float* delta) {
  const float scale = 1.0f / sqrtf((float)a.hd);
  const size_t s1 = bwd_dq_smem(a.hd), s2 = bwd_dkv_smem(a.hd);
  allow_smem(attn_bwd_dq_kernel<DPL>, s1, "attn_bwd_dq_kernel smem");
  allow_smem(attn_bwd_dkv_kernel<DPL>, s2, "attn_bwd_dkv_kernel smem");
  attn_bwd_dq_kernel<DPL><<<dim3(a.n_tiles, a.H), kThreads, s1, s>>>(a, scale, out, lse, dout, dq, delta);
  check_launch("attn_bwd_dq_kernel", s);
  attn_bwd_dkv_kernel<DPL><<<dim3(a.n_tiles, a.KV), kThreads, s2, s>>>(a, scale, lse, dout, delta, dk, dv);
  check_launch("attn_bwd_dkv_kernel", s);
}

template <int DPL>
void decode_impl(cudaStream_t s, const float* q, int ldq, const float* kc, const float* vc, int KVD, const int32_t* base,
                 const int32_t* nkeys, int B, int H, int KV, int hd, float* out, int ldo) {
  const int group = H / KV;
  const size_t smem = sizeof(float) * (size_t)group * hd;
  allow_smem(attn_decode_kernel<DPL>, smem, "attn_decode_kernel smem");
  attn_decode_kernel<DPL><<<dim3(B, KV), 32 * group, smem, s>>>(q, ldq, kc, vc, KVD, base, nkeys, H, KV, hd, 1.0f / sqrtf((float)hd), out,
                                                                 ldo);
  check_launch("attn_decode_kernel", s);
}

void check_grid(const AttnArgs& a) {
  if (a.H > 65535 || a.KV > 65535) raise(RS_ERR_UNSUPPORTED, "attention: %d heads is too many", a.H);
}

}  // namespace

void attention_tiles(const int32_t* seg, int S, int T, std::vector<int4>& tiles) {
  tiles.clear();
  for (int s = 0; s < S; s++) {
    const int b = seg[s], e = s + 1 < S ? seg[s + 1] : T;
    for (int r = b; r < e; r += kAttnRows) tiles.push_back(make_int4(r, std::min(r + kAttnRows, e), b, e));
  }
}

void attention_tiles(const int32_t* seg, int S, const rs_shared::RowLayout& row, std::vector<int4>& tiles, std::vector<int2>& prefix) {
  const int T = (int)row.pos.size();
  tiles.clear();
  prefix.clear();
  for (int s = 0; s < S; s++) {
    const int b = seg[s], e = s + 1 < S ? seg[s + 1] : T;
    for (int r = b; r < e; r += kAttnRows) {
      tiles.push_back(make_int4(r, std::min(r + kAttnRows, e), b, row.key_end[b]));
      prefix.push_back(make_int2(row.pre_begin[b], row.pre_end[b]));
    }
  }
}

void attention_fwd(cudaStream_t s, const AttnArgs& a, float* out, float* lse) {
  if (a.n_tiles <= 0) return;
  check_grid(a);
  switch (dims_per_lane(a.hd)) {
    case 1: fwd_impl<1>(s, a, out, lse); break;
    case 2: fwd_impl<2>(s, a, out, lse); break;
    case 4: fwd_impl<4>(s, a, out, lse); break;
    default: fwd_impl<8>(s, a, out, lse); break;
  }
}

void attention_bwd(cudaStream_t s, const AttnArgs& a, const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv,
                   float* delta) {
  if (a.n_tiles <= 0) return;
  check_grid(a);
  switch (dims_per_lane(a.hd)) {
    case 1: bwd_impl<1>(s, a, out, lse, dout, dq, dk, dv, delta); break;
    case 2: bwd_impl<2>(s, a, out, lse, dout, dq, dk, dv, delta); break;
    case 4: bwd_impl<4>(s, a, out, lse, dout, dq, dk, dv, delta); break;
    default: bwd_impl<8>(s, a, out, lse, dout, dq, dk, dv, delta); break;
  }
}

void attention_decode(cudaStream_t s, const float* q, int ldq, const float* kc, const float* vc, int KVD, const int32_t* base,
                      const int32_t* nkeys, int B, int H, int KV, int hd, float* out, int ldo) {
  if (B <= 0) return;
  if (H / KV > 32) raise(RS_ERR_UNSUPPORTED, "attention decode: %d query heads per kv head is above the supported 32", H / KV);
  switch (dims_per_lane(hd)) {
    case 1: decode_impl<1>(s, q, ldq, kc, vc, KVD, base, nkeys, B, H, KV, hd, out, ldo); break;
    case 2: decode_impl<2>(s, q, ldq, kc, vc, KVD, base, nkeys, B, H, KV, hd, out, ldo); break;
    case 4: decode_impl<4>(s, q, ldq, kc, vc, KVD, base, nkeys, B, H, KV, hd, out, ldo); break;
    default: decode_impl<8>(s, q, ldq, kc, vc, KVD, base, nkeys, B, H, KV, hd, out, ldo); break;
  }
}

}  // namespace rsc

// --------------------------------------------------------------------------------------- ABI entry points
using namespace rsc;

namespace {

int32_t check_attn(const char* what, int32_t T, int32_t H, int32_t KV, int32_t hd, const int32_t* seg, int32_t S, rs_error* err) {
  if (T < 1 || H < 1 || KV < 1 || hd < 1)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: sizes must be positive (T=%d H=%d KV=%d hd=%d)", what, T, H, KV, hd);
  if (H % KV) return fail(err, RS_ERR_INVALID_ARGUMENT, "%s: heads %d not divisible by kv heads %d", what, H, KV);
  return rs_shared::check_segments(seg, S, T, err);
}

// Device copies of the stand-alone inputs and the tile list.
struct AttnCall {
  DevBuf<float> q, k, v;
  DevBuf<int4> tiles;
  AttnArgs a{};
  AttnCall(cudaStream_t s, const float* hq, const float* hk, const float* hv, int T, int H, int KV, int hd, const int32_t* seg, int S) {
    upload(q, hq, (size_t)T * H * hd, s, "attention q");
    upload(k, hk, (size_t)T * KV * hd, s, "attention k");
    upload(v, hv, (size_t)T * KV * hd, s, "attention v");
    std::vector<int4> t;
    attention_tiles(seg, S, T, t);
    upload(tiles, t.data(), t.size(), s, "attention tiles");
    a = AttnArgs{T, H, KV, hd, q.p, H * hd, k.p, KV * hd, v.p, KV * hd, H * hd, tiles.p, (int)t.size(), nullptr};
  }
};

}  // namespace

extern "C" {

int32_t rs_attention_fwd(const float* q, const float* k, const float* v, int32_t T, int32_t H, int32_t KV, int32_t hd,
                         const int32_t* seg_starts, int32_t S, float* out, float* lse, rs_error* err) {
  if (int32_t st = check_attn("attention_fwd", T, H, KV, hd, seg_starts, S, err)) return st;
  if (!q || !k || !v || !out || !lse) return fail(err, RS_ERR_INVALID_ARGUMENT, "attention_fwd: null buffer");
  return guard(err, "attention_fwd", [&] {
    require_device();
    cudaStream_t s = thread_stream();
    AttnCall c(s, q, k, v, T, H, KV, hd, seg_starts, S);
    DevBuf<float> o, l;
    o.reserve((size_t)T * H * hd, "attention out");
    l.reserve((size_t)T * H, "attention lse");
    attention_fwd(s, c.a, o.p, l.p);
    to_host(out, o.p, sizeof(float) * (size_t)T * H * hd, s, "attention out");
    to_host(lse, l.p, sizeof(float) * (size_t)T * H, s, "attention lse");
  });
}

int32_t rs_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* out, const float* lse, int32_t T,
                         int32_t H, int32_t KV, int32_t hd, const int32_t* seg_starts, int32_t S, float* dq, float* dk, float* dv,
                         rs_error* err) {
  if (int32_t st = check_attn("attention_bwd", T, H, KV, hd, seg_starts, S, err)) return st;
  if (!dout || !q || !k || !v || !out || !lse || !dq || !dk || !dv)
    return fail(err, RS_ERR_INVALID_ARGUMENT, "attention_bwd: null buffer");
  return guard(err, "attention_bwd", [&] {
    require_device();
    cudaStream_t s = thread_stream();
    AttnCall c(s, q, k, v, T, H, KV, hd, seg_starts, S);
    DevBuf<float> o, l, dO, gq, gk, gv, delta;
    upload(o, out, (size_t)T * H * hd, s, "attention out");
    upload(l, lse, (size_t)T * H, s, "attention lse");
    upload(dO, dout, (size_t)T * H * hd, s, "attention dout");
    gq.reserve((size_t)T * H * hd, "attention dq");
    gk.reserve((size_t)T * KV * hd, "attention dk");
    gv.reserve((size_t)T * KV * hd, "attention dv");
    delta.reserve((size_t)T * H, "attention delta");
    attention_bwd(s, c.a, o.p, l.p, dO.p, gq.p, gk.p, gv.p, delta.p);
    to_host(dq, gq.p, sizeof(float) * (size_t)T * H * hd, s, "attention dq");
    to_host(dk, gk.p, sizeof(float) * (size_t)T * KV * hd, s, "attention dk");
    to_host(dv, gv.p, sizeof(float) * (size_t)T * KV * hd, s, "attention dv");
  });
}

}  // extern "C"
