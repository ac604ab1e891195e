// The dispatcher behind GemmImpl::Auto (see gemm_router.h), and gemm() itself.
#include "gemm_router.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "blas_dispatch.h"
#include "common.h"
#include "sgemm.h"

namespace rs::router {

namespace {
constexpr int64_t kTinyWork = int64_t(1) << 15;     // below: always our sgemm, never measured
constexpr int64_t kOnMinWork = int64_t(1) << 19;    // blas_mode on: the old fixed rule, for benchmarks and old runs
constexpr int64_t kMeasureWork = int64_t(1) << 28;  // scratch products are cut down to this many multiply-adds
constexpr int64_t kMeasureElems = int64_t(1) << 22; // and each scratch matrix to 16 MB
constexpr int kMinPairs = 7;          // timed runs per kernel, alternating own / BLAS: at least this many,
constexpr double kMinSeconds = 4e-3;  // more until both kernels have run this long (a neighbour's burst passes),
constexpr int kMaxPairs = 41;         // at most this many
constexpr int kFirstWarmups = 4;      // a process's first measurement: BLAS buffers paged in, thread pools started
constexpr double kBlasMargin = 1.03;  // BLAS's upper quartile must beat our median by this much (our bits
                                      // do not depend on the thread count)
constexpr double kCloseCall = 1.3;    // within this ratio either way, three times as many pairs before deciding
constexpr double kAgreeTol = 1e-3;    // max |blas - own| / max |own|; rounding differences are ~1e-6

struct Route {
  bool blas = false;
  bool pinned = false;
  double own_s = 0, blas_s = 0, blas_q3 = 0, rel_diff = 0;  // medians, BLAS's upper quartile (seconds)
  int M = 0, N = 0, K = 0;  // the scratch product that was timed
};

struct State {
  std::mutex mu;
  std::map<std::string, Route> table;
  std::string rejected;  // why BLAS is never used (it disagreed with our sgemm)
  int slow_own = 1, slow_blas = 1;  // test hooks (rs_test_hooks)
  bool corrupt = false;
  double worst_diff = 0;  // largest relative difference over the measured classes
  double spent_s = 0;     // wall time spent measuring
};

State& state() {
  static State s;
  return s;
}

// [nt][nt]:<M>x<N>x<K>:<threads>t, each dimension a power of 2 (as class_name writes them).
bool valid_class(const std::string& c) {
  if (c.size() < 12 || (c[0] != 'n' && c[0] != 't') || (c[1] != 'n' && c[1] != 't') || c[2] != ':') return false;
  size_t i = 3;
  auto number = [&](char end) {
    const size_t d0 = i;
    while (i < c.size() && std::isdigit((unsigned char)c[i])) i++;
    if (i == d0 || i >= c.size() || c[i] != end) return false;
    i++;
    return true;
  };
  return number('x') && number('x') && number(':') && number('t') && i == c.size();
}

// The pinned classes of a blas_routes string ("nt:2048x256x128:2t=blas,...") into *out; false (*why set) for a bad entry.
bool parse_pins(const std::string& all, std::map<std::string, Route>* out, std::string* why) {
  std::map<std::string, Route> pinned;
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(',', start);
    if (end == std::string::npos) end = all.size();
    const std::string item = all.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string cls = item.substr(0, eq), to = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (!valid_class(cls) || (to != "own" && to != "blas")) {
      *why = "blas_routes: bad entry '" + item + "' (want e.g. nt:2048x256x128:2t=blas)";
      return false;
    }
    Route r;
    r.blas = to == "blas";
    r.pinned = true;
    pinned[cls] = r;
  }
  *out = std::move(pinned);
  return true;
}

void fill(float* p, int64_t n, uint32_t seed) {
  uint32_t x = seed;
  for (int64_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    p[i] = (float)(x >> 8) * (2.f / 16777216.f) - 1.f;
  }
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, (size_t)(q * (double)v.size()))];
}
double median(const std::vector<double>& v) { return quantile(v, 0.5); }

// Times both kernels on a scratch product of the class's shape and compares their results. Caller holds s.mu.
Route measure(State& s, bool ta, bool tb, int M, int N, int K, int threads) {
  auto too_big = [&] {
    return (int64_t)M * N * K > kMeasureWork || (int64_t)M * K > kMeasureElems || (int64_t)K * N > kMeasureElems ||
           (int64_t)M * N > kMeasureElems;
  };
  while (too_big()) {
    int& d = M >= N && M >= K ? M : N >= K ? N : K;
    d = std::max(1, d / 2);
  }
  Route r;
  r.M = M, r.N = N, r.K = K;
  FloatBuf A, B, Co, Cb;
  if (!A.resize((size_t)M * K) || !B.resize((size_t)K * N) || !Co.resize((size_t)M * N) || !Cb.resize((size_t)M * N))
    throw std::bad_alloc();
  fill(A.p, (int64_t)M * K, 1);
  fill(B.p, (int64_t)K * N, 2);
  const int lda = ta ? M : K, ldb = tb ? K : N;
  auto own = [&] { sgemm_own(ta, tb, M, N, K, 1.f, A.p, lda, B.p, ldb, 0.f, Co.p, N, threads); };
  auto blas = [&] { blas::sgemm(ta, tb, M, N, K, 1.f, A.p, lda, B.p, ldb, 0.f, Cb.p, N, threads); };
  // Runs alternate, one of each per pair, as products alternate with our other OpenMP kernels in a training step: a
  // kernel that suffers from the other's threads still spinning after a call (OpenMP's do, for a while) is timed so.
  // Medians: a neighbour's burst on a shared machine moves a few runs, not the middle one.
  static bool first = true;  // guarded by s.mu
  for (int w = 0; w < (first ? kFirstWarmups : 1); w++) {
    own();
    blas();
  }
  first = false;
  using clock = std::chrono::steady_clock;
  auto timed = [](auto& run, int repeat) {
    const auto t0 = clock::now();
    for (int i = 0; i < repeat; i++) run();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  std::vector<double> t_own, t_blas;
  double total_own = 0, total_blas = 0;
  auto pairs = [&](int min_pairs, double min_seconds, int max_pairs) {
    while ((int)t_own.size() < min_pairs || ((total_own < min_seconds || total_blas < min_seconds) && (int)t_own.size() < max_pairs)) {
      t_own.push_back(timed(own, s.slow_own));
      t_blas.push_back(timed(blas, s.slow_blas));
      total_own += t_own.back();
      total_blas += t_blas.back();
    }
  };
  pairs(kMinPairs, kMinSeconds, kMaxPairs);
  const double ratio = median(t_own) / median(t_blas);
  if (ratio > 1 / kCloseCall && ratio < kCloseCall) pairs(3 * kMinPairs, 3 * kMinSeconds, 3 * kMaxPairs);
  r.own_s = median(t_own);
  r.blas_s = median(t_blas);
  r.blas_q3 = quantile(t_blas, 0.75);
  if (s.corrupt) Cb.p[0] += 1.f + std::fabs(Co.p[0]);
  double scale = 0, diff = 0;
  for (int64_t i = 0; i < (int64_t)M * N; i++) {
    scale = std::max(scale, (double)std::fabs(Co.p[i]));
    const double d = std::fabs((double)Cb.p[i] - (double)Co.p[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
  }
  r.rel_diff = diff / std::max(scale, 1e-30);
  // BLAS's times are the more spread (bimodal: it runs at half speed while our kernels' OpenMP threads still spin
  // after a call), so it must win with its upper quartile, not just its median.
  r.blas = r.rel_diff <= kAgreeTol && r.blas_q3 * kBlasMargin < r.own_s;
  return r;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
}  // namespace

std::string class_name(bool ta, bool tb, int M, int N, int K, int threads) {
  if ((int64_t)M * N * K < kTinyWork) return "";
  // Each dimension rounded down to a power of 2: a class spans a factor of 2 in M, N and K.
  auto bucket = [](int x) {
    int64_t b = 1;
    while (b * 2 <= x) b *= 2;
    return std::to_string(b);
  };
  return std::string(1, ta ? 't' : 'n') + (tb ? 't' : 'n') + ":" + bucket(M) + "x" + bucket(N) + "x" + bucket(K) + ":" +
         std::to_string(threads) + "t";
}

bool use_blas(bool ta, bool tb, int M, int N, int K, int threads) {
  switch (blas::mode()) {
    case blas::Mode::Off: return false;
    case blas::Mode::On: return blas::loaded() && (int64_t)M * N * K >= kOnMinWork;
    case blas::Mode::Auto: break;
  }
  if (!blas::loaded()) return false;
  const std::string cls = class_name(ta, tb, M, N, K, threads);
  if (cls.empty()) return false;
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.table.find(cls);
  if (it != s.table.end()) return it->second.blas;
  if (!s.rejected.empty()) {
    s.table[cls] = Route{};
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Route r = measure(s, ta, tb, M, N, K, threads);
  s.spent_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.worst_diff = std::max(s.worst_diff, r.rel_diff);
  if (r.rel_diff > kAgreeTol) {
    s.rejected = "BLAS disagrees with our sgemm on " + cls + " (max relative difference " + fmt("%.1e", r.rel_diff) + " > " +
                 fmt("%.0e", kAgreeTol) + "): never used";
    for (auto& [name, route] : s.table)
      if (!route.pinned) route.blas = false;
  }
  s.table[cls] = r;
  return r.blas;
}

bool check_routes(const std::string& routes, std::string* why) {
  std::map<std::string, Route> unused;
  return parse_pins(routes, &unused, why);
}

void reset(const std::string& routes) {
  std::map<std::string, Route> pinned;
  std::string why;
  parse_pins(routes, &pinned, &why);  // checked by the caller (check_routes)
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  s.table = std::move(pinned);
  s.rejected.clear();
  s.worst_diff = 0;
  s.spent_s = 0;
}

void set_test_hooks(int slowdown_own, int slowdown_blas, bool corrupt) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  s.slow_own = std::max(1, slowdown_own);
  s.slow_blas = std::max(1, slowdown_blas);
  s.corrupt = corrupt;
}

std::string routes() {
  if (!blas::loaded() || blas::mode() == blas::Mode::Off) return "off";
  if (blas::mode() == blas::Mode::On) return "on";
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  std::string out;
  for (const auto& [cls, r] : s.table) out += (out.empty() ? "" : ",") + cls + (r.blas ? "=blas" : "=own");
  return out;
}

std::string decision() {
  if (!blas::loaded()) return "our sgemm only: " + blas::describe();
  if (blas::mode() == blas::Mode::Off) return "our sgemm only (BLAS switched off)";
  if (blas::mode() == blas::Mode::On) return "BLAS for every product of at least 2^19 multiply-adds (blas_mode on), unmeasured";
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  std::string measured, pinned;
  int n_measured = 0;
  for (const auto& [cls, r] : s.table) {
    n_measured += !r.pinned && r.own_s > 0;
    if (r.pinned) {
      pinned += (pinned.empty() ? "" : ", ") + cls + (r.blas ? " -> blas" : " -> own");
    } else if (r.own_s > 0) {
      measured += (measured.empty() ? "" : ", ") + cls + " (" + std::to_string(r.M) + "x" + std::to_string(r.N) + "x" +
                  std::to_string(r.K) + " own " + fmt("%.3f", r.own_s * 1e3) + " ms, blas " + fmt("%.3f", r.blas_s * 1e3) + " ms, q3 " +
                  fmt("%.3f", r.blas_q3 * 1e3) + " ms) blas " + fmt("%.2f", r.own_s / r.blas_s) + "x -> " + (r.blas ? "blas" : "own");
    }
  }
  std::string out = "measured: " + (measured.empty() ? std::string("nothing yet (each shape class is timed at its first product)") : measured);
  if (!pinned.empty()) out += "; pinned: " + pinned;
  if (!measured.empty() && s.rejected.empty()) out += "; results agree (max relative difference " + fmt("%.1e", s.worst_diff) + ")";
  if (n_measured) out += "; " + std::to_string(n_measured) + " classes measured in " + fmt("%.0f", s.spent_s * 1e3) + " ms";
  if (!s.rejected.empty()) out += "; " + s.rejected;
  if (s.slow_own > 1 || s.slow_blas > 1 || s.corrupt) out += "; TEST HOOKS ACTIVE";
  return out;
}

}  // namespace rs::router

namespace rs {

void gemm(GemmImpl impl, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, int threads) {
  if (M <= 0 || N <= 0) return;
  const bool use_blas = K > 0 && (impl == GemmImpl::Blas || (impl == GemmImpl::Auto && router::use_blas(ta, tb, M, N, K, threads)));
  if (use_blas) blas::sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads);
  else sgemm_own(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads);
}

}  // namespace rs
