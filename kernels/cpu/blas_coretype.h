// Which OPENBLAS_CORETYPE to force, from the core OpenBLAS detected and the vector units this CPU has.
// OpenBLAS's DYNAMIC_ARCH picks its kernels from a table of CPU models known when it was built; a newer CPU
// (OpenBLAS 0.3.21 on some recent Xeons and EPYCs) falls back to "Prescott", SSE3 kernels at a quarter of the
// speed the CPU can reach. The core a CPU can run is named by its widest vector unit: SkylakeX for AVX-512,
// Haswell for AVX2+FMA, Sandybridge for AVX. Pure and header-only so it is unit-tested on sample inputs
// (test/kernels/blas-coretype.test.ts); blas_dispatch.cpp applies it before it loads the library for good.
#pragma once
#include <cctype>
#include <string>

namespace rs::blas {

enum SimdLevel : int { kSimdUnknown = -1, kSimdSse = 0, kSimdAvx = 1, kSimdAvx2 = 2, kSimdAvx512 = 3 };

inline std::string lowercase(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

inline const char* simd_name(int level) {
  switch (level) {
    case kSimdAvx512: return "AVX-512";
    case kSimdAvx2: return "AVX2";
    case kSimdAvx: return "AVX";
    case kSimdSse: return "SSE";
    default: return "unknown";
  }
}

// The widest vector unit an OpenBLAS x86 core's kernels use (names as openblas_get_corename() returns them,
// any case: DYNAMIC_ARCH builds say "SkylakeX", fixed-target builds "SKYLAKEX"); kSimdUnknown for others.
inline int core_simd_level(const std::string& corename) {
  const std::string c = lowercase(corename);
  for (const char* n : {"skylakex", "cooperlake", "sapphirerapids"})
    if (c == n) return kSimdAvx512;
  // Excavator has AVX2; its kernels are left alone rather than second-guessed.
  for (const char* n : {"haswell", "zen", "skylake", "excavator"})
    if (c == n) return kSimdAvx2;
  for (const char* n : {"sandybridge", "bulldozer", "piledriver", "steamroller"})
    if (c == n) return kSimdAvx;
  for (const char* n : {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "barcelona", "opteron",
                        "opteron(sse3)", "bobcat", "nano", "katmai", "coppermine", "northwood", "banias", "yonah",
                        "athlon", "generic"})
    if (c == n) return kSimdSse;
  return kSimdUnknown;
}

// The OpenBLAS core whose kernels use `level`'s vector unit; nullptr when none is worth forcing.
inline const char* coretype_for_level(int level) {
  switch (level) {
    case kSimdAvx512: return "SkylakeX";
    case kSimdAvx2: return "Haswell";
    case kSimdAvx: return "Sandybridge";
    default: return nullptr;
  }
}

struct CoretypeChoice {
  std::string force;  // OPENBLAS_CORETYPE to load the library with; "" = keep OpenBLAS's own choice
  std::string why;    // a clause for the log line; "" when there is nothing to say
};

// detected: openblas_get_corename() of the library as loaded with no OPENBLAS_CORETYPE; cpu_level: this CPU's
// SimdLevel; user_coretype: OPENBLAS_CORETYPE as the user set it (nullptr or "" = unset); dynamic_arch: whether
// the build can switch cores at all (openblas_get_config() names DYNAMIC_ARCH).
inline CoretypeChoice choose_coretype(const std::string& detected, int cpu_level, const char* user_coretype, bool dynamic_arch) {
  if (user_coretype && *user_coretype) return {"", std::string("OPENBLAS_CORETYPE=") + user_coretype + " set by the user"};
  const int core = core_simd_level(detected);
  if (core == kSimdUnknown) return {"", "core " + detected + " not known to rollstream, left as detected"};
  if (core >= cpu_level) return {"", ""};
  const char* want = coretype_for_level(cpu_level);
  const std::string lacks = "core " + detected + " uses " + simd_name(core) + ", the CPU has " + simd_name(cpu_level);
  if (!want) return {"", ""};
  if (!dynamic_arch) return {"", lacks + " (not a DYNAMIC_ARCH build: cannot switch)"};
  return {want, lacks};
}

}  // namespace rs::blas
