// Attention through block tables, for the engine (the CUDA twin of cpu/paged_attention.cpp). Every row of a step,
// prompt or decode, runs the same kernel: block (row, kv head), one warp per query head of the group, lane j scores
// key j0 + j of 32-key tiles aligned at position 0, online softmax, P.V with lanes owning head dims. A row's output
// depends only on its query and the keys 0..pos of its own sequence, read in order, so it is the same bits whether
// the row was prefilled with others, in a later chunk, or decoded: the property that lets sequences share, reuse
// and recompute blocks. (Its bits differ from the CPU backend's, as every CUDA kernel's do.)
#include "paged_attention.cuh"

namespace rsc {

namespace {

__device__ __forceinline__ const float* key_row(const PagedKvDev& kv, const int32_t* table, int l, int j) {
  const int64_t blk = table[j / kv.bs];
  return kv.pool + blk * kv.block_floats() + (int64_t)l * 2 * kv.bs * kv.KVD + (int64_t)(j % kv.bs) * kv.KVD;
}

__global__ void paged_store_kernel(PagedKvDev kv, int l, const float* __restrict__ k, const float* __restrict__ v, int ld, PagedRows rows) {
  const int r = blockIdx.x;
  const int32_t* table = rows.tables + rows.table_off[rows.seq[r]];
  float* kr = const_cast<float*>(key_row(kv, table, l, rows.pos[r]));
  float* vr = kr + (int64_t)kv.bs * kv.KVD;
  for (int c = threadIdx.x; c < kv.KVD; c += blockDim.x) {
    kr[c] = k[(int64_t)r * ld + c];
    vr[c] = v[(int64_t)r * ld + c];
  }
}

template <int DPL>
__global__ void paged_attn_kernel(PagedKvDev kv, int l, const float* __restrict__ q, int ldq, PagedRows rows, int H, int KV, int hd,
                                  float scale, float* __restrict__ out, int ldo) {
  extern __shared__ float qs_all[];  // [group][hd]
  const int r = blockIdx.x, kvh = blockIdx.y, group = H / KV;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, h = kvh * group + warp;
  float* qs = qs_all + warp * hd;
  for (int d = lane; d < hd; d += 32) qs[d] = q[(int64_t)r * ldq + (int64_t)h * hd + d];
  __syncwarp();
  const int n = rows.pos[r] + 1;
  const int32_t* table = rows.tables + rows.table_off[rows.seq[r]];
  const int64_t vo = (int64_t)kv.bs * kv.KVD + (int64_t)kvh * hd;
  float m = -INFINITY, lsum = 0.f, acc[DPL];
#pragma unroll
  for (int u = 0; u < DPL; u++) acc[u] = 0.f;
  for (int j0 = 0; j0 < n; j0 += 32) {
    const int j = j0 + lane;
    const bool valid = j < n;
    float s = 0.f;
    if (valid) {
      const float* kr = key_row(kv, table, l, j) + (int64_t)kvh * hd;
      for (int d = 0; d < hd; d++) s = fmaf(qs[d], kr[d], s);
    }
    const float sc = valid ? s * scale : -INFINITY;
    const float mn = fmaxf(m, warp_max(sc));  // finite: key j0 is valid
    const float corr = expf(m - mn);
    const float p = valid ? expf(sc - mn) : 0.f;
    lsum = lsum * corr + warp_sum(p);
#pragma unroll
    for (int u = 0; u < DPL; u++) acc[u] *= corr;
    const int nj = min(32, n - j0);
    for (int jj = 0; jj < nj; jj++) {
      const float pj = __shfl_sync(kFull, p, jj);
      const float* vr = key_row(kv, table, l, j0 + jj) + vo;
#pragma unroll
      for (int u = 0; u < DPL; u++) {
        const int d = lane + 32 * u;
        if (d < hd) acc[u] = fmaf(pj, vr[d], acc[u]);
      }
    }
    m = mn;
  }
  const float inv = 1.0f / lsum;
#pragma unroll
  for (int u = 0; u < DPL; u++) {
    const int d = lane + 32 * u;
    if (d < hd) out[(int64_t)r * ldo + (int64_t)h * hd + d] = acc[u] * inv;
  }
}

template <int DPL>
void attn_impl(cudaStream_t s, const PagedKvDev& kv, int l, const float* q, int ldq, const PagedRows& rows, int H, int KV, int hd, float* out,
               int ldo) {
  const int group = H / KV;
  const size_t smem = sizeof(float) * (size_t)group * hd;
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(paged_attn_kernel<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), "paged_attn_kernel smem");
  paged_attn_kernel<DPL><<<dim3(rows.R, KV), 32 * group, smem, s>>>(kv, l, q, ldq, rows, H, KV, hd, 1.0f / sqrtf((float)hd), out, ldo);
  check_launch("paged_attn_kernel", s);
}

}  // namespace

void paged_kv_store(cudaStream_t s, const PagedKvDev& kv, int l, const float* k, const float* v, int ld, const PagedRows& rows) {
  if (rows.R <= 0) return;
  paged_store_kernel<<<rows.R, 128, 0, s>>>(kv, l, k, v, ld, rows);
  check_launch("paged_store_kernel", s);
}

void paged_attention(cudaStream_t s, const PagedKvDev& kv, int l, const float* q, int ldq, const PagedRows& rows, int H, int KV, int hd,
                     float* out, int ldo) {
  if (rows.R <= 0) return;
  if (H / KV > 32) raise(RS_ERR_UNSUPPORTED, "paged attention: %d query heads per kv head is above the supported 32", H / KV);
  if (hd > 256) raise(RS_ERR_UNSUPPORTED, "paged attention: head_dim %d is above the supported 256", hd);
  if (hd <= 32) attn_impl<1>(s, kv, l, q, ldq, rows, H, KV, hd, out, ldo);
  else if (hd <= 64) attn_impl<2>(s, kv, l, q, ldq, rows, H, KV, hd, out, ldo);
  else if (hd <= 128) attn_impl<4>(s, kv, l, q, ldq, rows, H, KV, hd, out, ldo);
  else attn_impl<8>(s, kv, l, q, ldq, rows, H, KV, hd, out, ldo);
}

}  // namespace rsc
