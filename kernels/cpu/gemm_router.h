// Which kernel runs a product the caller leaves to the dispatcher (GemmImpl::Auto): measured, never assumed.
// A BLAS library that loads is not necessarily fast (OpenBLAS on a CPU it does not recognise runs SSE3 kernels at
// a quarter of our sgemm's speed), and a fast one still loses on small products to its call overhead.
//
// Products fall into shape classes: transposes x M, N and K each rounded down to a power of 2 x thread count, named
// like "nt:2048x256x128:2t" (in a training step, about one class per weight matrix and direction). The first product
// of a class times our own sgemm and the BLAS on scratch operands of its shape (cut down to at most 2^28
// multiply-adds): one run of each in turn, as products alternate with our other OpenMP kernels in a training step,
// at least 7 pairs and until each kernel has run 4 ms (three times that for a close call, within 1.3x), medians. It
// checks that the two results agree and routes the class to the faster: to BLAS only when even its upper quartile
// beats our median by 3% (its times are bimodal: it runs at half speed while our OpenMP threads still spin after a
// call; and our kernel's bits do not depend on the thread count). A class costs ~10-40 ms once; the decision holds until
// the BLAS mode is set again. If BLAS ever disagrees with our sgemm, it is not used at all. Products under 2^15
// multiply-adds always run on ours.
//
// Replay needs the run's routing, not a fresh measurement: routes() is what the learner records, and
// rs_settings.blas_routes pins it ("nt:2048x256x128:2t=blas,tn:128x128x2048:2t=own"; installed by every
// rs_set_settings). Test hooks (rs_test_hooks, a test-only call that also forgets measured routes): slowdown_own /
// slowdown_blas = N runs that kernel N times per timed run; corrupt_blas perturbs the BLAS result before the comparison.
#pragma once
#include <string>

namespace rs::router {

// Whether a GemmImpl::Auto product (K > 0) runs on BLAS. May measure its class first.
bool use_blas(bool trans_a, bool trans_b, int M, int N, int K, int threads);
// Whether `routes` is a valid blas_routes string (false and *why set when not).
bool check_routes(const std::string& routes, std::string* why);
// Forgets measured routes and pins `routes` (checked with check_routes first).
void reset(const std::string& routes);
// Test hooks (rs_test_hooks): timed runs repeat our sgemm / BLAS this many times; corrupt perturbs BLAS's result.
void set_test_hooks(int slowdown_own, int slowdown_blas, bool corrupt);
// The class a product belongs to ("nt:2048x256x128:2t"), or "" for products that always run on our sgemm.
std::string class_name(bool trans_a, bool trans_b, int M, int N, int K, int threads);
// How products are routed, machine-readable: "off" (our sgemm only), "on" (BLAS for every product of at least
// 2^19 multiply-adds), or the auto table "class=blas|own,..." (measured and pinned classes, "" before any).
std::string routes();
// The same in words, with the timings and the agreement check, for the log.
std::string decision();

}  // namespace rs::router
