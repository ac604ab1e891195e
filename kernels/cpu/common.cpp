#include "common.h"

namespace rs {

int default_threads() { return omp_get_num_procs() > 0 ? omp_get_num_procs() : 1; }

// Per calling thread: the N-API addon calls stand-alone kernels from libuv worker threads, each of which
// sets its own count before the call.
static thread_local int tl_threads = 0;
int current_threads() { return tl_threads > 0 ? tl_threads : default_threads(); }
void set_current_threads(int n) { tl_threads = n > 0 ? n : 0; }

void segment_bounds(const int32_t* seg_starts, int32_t S, int32_t T, int32_t* begin, int32_t* end) {
  for (int32_t s = 0; s < S; s++) {
    int32_t b = seg_starts[s], e = s + 1 < S ? seg_starts[s + 1] : T;
    for (int32_t t = b; t < e; t++) {
      begin[t] = b;
      end[t] = e;
    }
  }
}


}  // namespace rs
