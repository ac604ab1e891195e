#!/usr/bin/env bash
# Builds kernels/build/Release/librollstream_cuda.so, the CUDA implementation of kernels/kernels.h.
#
#   bash kernels/cuda/build.sh          # from the package root (npm install calls it as `... || true`)
#
# Exits 0 with a message when nvcc is missing (the CPU backend is used then). Environment:
#   NVCC                      nvcc to use (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   ROLLSTREAM_CUDA_ARCH      replaces the -gencode flags (default: sm_90a + sm_90 SASS + compute_90 PTX)
#   ROLLSTREAM_CUDA_SM80=1    also emit sm_80 SASS (A100); off by default to keep the build short
#   ROLLSTREAM_CUDA_OUT       output folder (default: kernels/build/Release)
#   ROLLSTREAM_CUDA_JOBS      parallel nvcc processes (default: number of cores)
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kernels="$(cd "$here/.." && pwd)"
out="${ROLLSTREAM_CUDA_OUT:-$kernels/build/Release}"

nvcc="${NVCC:-}"
if [ -z "$nvcc" ]; then
  if command -v nvcc >/dev/null 2>&1; then nvcc="$(command -v nvcc)"
  elif [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc
  fi
fi
if [ -z "$nvcc" ] || ! [ -x "$(command -v "$nvcc" 2>/dev/null || echo "$nvcc")" ]; then
  echo "rollstream: nvcc not found${nvcc:+ ($nvcc)}; skipping the CUDA backend (the CPU backend will be used)"
  exit 0
fi
ver="$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')"
major="${ver%% *}"
if [ -z "$major" ] || [ "$major" -lt 12 ]; then
  echo "rollstream: $nvcc is CUDA ${ver:-unknown}; the CUDA backend needs CUDA 12 or newer (sm_90a). Skipping it."
  exit 0
fi

arch="${ROLLSTREAM_CUDA_ARCH:--gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90}"
if [ "${ROLLSTREAM_CUDA_SM80:-0}" = "1" ]; then arch="$arch -gencode=arch=compute_80,code=sm_80"; fi
jobs="${ROLLSTREAM_CUDA_JOBS:-$(nproc 2>/dev/null || echo 2)}"
flags="-O3 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden -Xcompiler -Wall $arch"

obj="$out/obj.cuda"
mkdir -p "$obj" || exit 1
start=$(date +%s)
echo "rollstream: building the CUDA backend with $nvcc (CUDA ${ver/ /.}, $jobs jobs): $arch"

# Compile every .cu in parallel; any failure fails the build with nvcc's message.
sources=("$here"/*.cu)
printf '%s\n' "${sources[@]}" | xargs -P "$jobs" -I{} sh -c '
  src="$1"; o="$2/$(basename "$src" .cu).o"
  "$3" $4 -I"$5" -c "$src" -o "$o" || { echo "rollstream: nvcc failed on $src" >&2; exit 255; }
' _ {} "$obj" "$nvcc" "$flags" "$kernels" || { echo "rollstream: CUDA backend build FAILED" >&2; exit 1; }

objs=()
for s in "${sources[@]}"; do objs+=("$obj/$(basename "$s" .cu).o"); done
tmp="$out/librollstream_cuda.so.tmp.$$"
if ! "$nvcc" -shared -cudart static $arch -o "$tmp" "${objs[@]}" \
    -Xlinker "--version-script=$here/exports.map" -Xlinker -soname,librollstream_cuda.so -Xlinker --no-undefined -ldl -lpthread -lrt; then
  rm -f "$tmp"
  echo "rollstream: linking the CUDA backend FAILED" >&2
  exit 1
fi
mv -f "$tmp" "$out/librollstream_cuda.so"
echo "rollstream: built $out/librollstream_cuda.so in $(( $(date +%s) - start )) s"
