// Model lifecycle: config checks, the flat parameter layout (see kernels.h), deterministic init, accessors.
#include "model.h"

#include <algorithm>
#include <string>

namespace rs {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// N(0, 1) keyed by (seed, index): Box-Muller on two hashed uniforms, so init order and threads do not matter.
float normal_at(uint64_t seed, uint64_t i) {
  const uint64_t a = splitmix64(seed ^ splitmix64(2 * i + 1)), b = splitmix64(seed ^ splitmix64(2 * i + 2));
  const double u1 = ((a >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
  const double u2 = (b >> 11) * (1.0 / 9007199254740992.0);
  return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace

bool Acts::ensure(const Dims& d, int T) {
  if (T <= cap) return true;
  const int64_t D = d.D, QKV = d.QKV, A = (int64_t)d.H * d.hd, I = d.I, H = d.H;
  const int64_t QK = d.qkn ? A + (int64_t)d.KV * d.hd : 0, QKR = d.qkn ? H + d.KV : 0;  // q/k norm inputs, rstds
  const int64_t per_layer = D /*ln1*/ + 1 + QKV + A + H + D /*xmid*/ + D /*ln2*/ + 1 + 2 * I + I + QK + QKR;
  const int64_t per_token = (int64_t)(d.L + 1) * D + d.L * per_layer + D + 1 /*lnf, rstdf*/ +
                            D + D + D + QKV + A + 2 * I + I /*scratch*/ +
                            0;
  // Attention scratch (head-transposed copies) is laid out with a padded row stride; size it separately.
  // Round capacity up so growing by a few tokens does not reallocate every call.
  const int newcap = std::max(T, std::min(2 * cap, 1 << 24));
  const int64_t attn_floats = attn_scratch_floats(AttnDims{newcap, d.H, d.KV, d.hd, 0, 0, 0, 0});
  if (!buf.resize((size_t)(per_token * newcap + attn_floats))) return false;
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
  attn = p;
  moe.resize(d.L);
  cap = newcap;
  return true;
}


void prepare_positions(rs_model* m, const int32_t* seg, const int32_t* parent, int32_t S, int32_t T) {
  m->acts.row.build(seg, parent, S, T);
  m->rope.ensure(std::min(m->d.maxPos, std::max(m->acts.row.max_pos + 1, 64)), m->d.rd, m->d.theta);
}

}  // namespace rs

using namespace rs;

extern "C" {

rs_model* rs_model_create(const rs_model_config* cfg, uint64_t seed, rs_error* err) {
  if (rs_shared::check_model_config(cfg, err)) return nullptr;
  rs_model* m = new (std::nothrow) rs_model();
  if (!m) {
    fail(err, RS_ERR_OUT_OF_MEMORY, "model: out of memory");
    return nullptr;
  }
  m->cfg = *cfg;
  m->cfg.moe_layers = nullptr;  // the caller's array: read now, never kept
  m->d = rs_shared::dims_of(*cfg);
  const Dims& d = m->d;
  m->threads = cfg->threads > 0 ? cfg->threads : default_threads();

  rs_shared::build_layout(m, rs_shared::moe_layer_flags(*cfg));
  const int64_t off = m->n_params;

  // The AdamW moments are allocated at their first use (rs::moments): a ZeRO-1 rank that shards them first never
  // holds the whole optimizer state, and a model that only generates never holds any.
  if (!m->params.resize(off) || !m->grads.resize(off)) {
    delete m;
    fail(err, RS_ERR_OUT_OF_MEMORY, "model: out of memory allocating 2 x %lld parameters", (long long)off);
    return nullptr;
  }
  m->opt_count = off;
  // Init: N(0, 0.02) for matrices, scaled by 1/sqrt(2L) for the two projections that write the residual stream
  // (GPT-2 style); ones for norms; zeros for biases.
  const double out_scale = 1.0 / std::sqrt(2.0 * d.L);
  for (const rs_tensor_info& t : m->tensors) {  // (q_norm / k_norm are norms: ones)
    float* p = m->params.p + t.offset;
    const std::string name = t.name;
    if (t.ndim == 1) {
      const float v = name.find("bias") != std::string::npos ? 0.f : 1.f;
      std::fill(p, p + t.size, v);
      continue;
    }
    const bool out_proj = name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
    const float std_ = (float)(0.02 * (out_proj ? out_scale : 1.0));
    const int64_t base = t.offset;
#pragma omp parallel for schedule(static) num_threads(m->threads)
    for (int64_t i = 0; i < t.size; i++) p[i] = std_ * normal_at(seed, (uint64_t)(base + i));
  }
  ok(err);
  return m;
}

void rs_model_free(rs_model* m) { delete m; }
int64_t rs_model_num_params(const rs_model* m) { return m ? m->n_params : 0; }
int32_t rs_model_num_tensors(const rs_model* m) { return m ? (int32_t)m->tensors.size() : 0; }
int32_t rs_model_threads(const rs_model* m) { return m ? m->threads : 0; }
int32_t rs_model_set_threads(rs_model* m, int32_t threads, rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "set_threads: null model");
  if (threads < 0 || threads > 4096) return fail(err, RS_ERR_INVALID_ARGUMENT, "set_threads: threads must be in [0, 4096] (got %d)", threads);
  m->threads = threads > 0 ? threads : default_threads();
  return RS_OK;
}

int32_t rs_model_tensor_info(const rs_model* m, int32_t index, rs_tensor_info* out, rs_error* err) {
  if (!m || !out) return fail(err, RS_ERR_INVALID_ARGUMENT, "tensor_info: null argument");
  if (index < 0 || index >= (int32_t)m->tensors.size())
    return fail(err, RS_ERR_INVALID_ARGUMENT, "tensor_info: index %d outside [0, %d)", index, (int32_t)m->tensors.size());
  *out = m->tensors[index];
  return ok(err);
}

float* rs_model_params(rs_model* m) { return m ? m->params.p : nullptr; }
float* rs_model_grads(rs_model* m) { return m ? m->grads.p : nullptr; }
float* rs_model_adam_m(rs_model* m) { return m && rs::moments(m, nullptr) == RS_OK ? m->adam_m.p : nullptr; }
float* rs_model_adam_v(rs_model* m) { return m && rs::moments(m, nullptr) == RS_OK ? m->adam_v.p : nullptr; }
int64_t rs_model_step_count(const rs_model* m) { return m ? m->step : 0; }
void rs_model_set_step_count(rs_model* m, int64_t step) {
  if (m && step >= 0) m->step = step;
}

int32_t rs_model_buffer_ranges(rs_model* m, int32_t kind, int32_t write, const int64_t* off, const int64_t* size, int32_t n, float* values,
                               rs_error* err) {
  if (!m) return fail(err, RS_ERR_INVALID_ARGUMENT, "buffer_ranges: null model");
  int64_t total = 0;
  if (int32_t s = rs_shared::check_buffer_ranges(m->n_params, kind, write, off, size, n, values, &total, err)) return s;
  if (int32_t s = rs_shared::check_moment_ranges(kind, off, size, n, m->opt_offset, m->opt_count, err)) return s;
  if (kind >= 2)
    if (int32_t s = rs::moments(m, err)) return s;
  // The moments hold the slice [opt_offset, opt_offset + opt_count) only: their flat offsets start there.
  float* buf = kind == 0 ? m->params.p : kind == 1 ? m->grads.p : (kind == 2 ? m->adam_m.p : m->adam_v.p) - m->opt_offset;
  int64_t at = 0;
  for (int32_t i = 0; i < n; at += size[i], i++) {
    if (buf + off[i] == values + at) continue;  // a getter's own pointer written back: already in place
    if (write) std::memcpy(buf + off[i], values + at, sizeof(float) * (size_t)size[i]);
    else std::memcpy(values + at, buf + off[i], sizeof(float) * (size_t)size[i]);
  }
  return ok(err);
}

}  // extern "C"
