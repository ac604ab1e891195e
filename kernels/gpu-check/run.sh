#!/usr/bin/env bash
# The whole GPU session in one prepared script (~8 minutes on an H200 box with python3 + torch + transformers +
# safetensors and no Node): build the CUDA backend with the device's nvcc (and the CPU backend with g++, for
# cross-checks), check every kernel and both model families against PyTorch, then benchmark against PyTorch +
# transformers. Logs go to $OUT (the device tool brings that folder back) or /tmp/rollstream-gpu.
#
#   bash kernels/gpu-check/run.sh                 # everything
#   STAGES="build check" bash kernels/gpu-check/run.sh
#   BENCH_ARGS="--shapes qwen0.5b --steps 3" bash kernels/gpu-check/run.sh
#   STAGES="build arch" bash kernels/gpu-check/run.sh     # only the qwen3 / qwen3_moe / glm4_moe check vs transformers
#
# If the device has no nvcc, a librollstream_cuda.so carried from a build machine is used (built with CUDA 13:
# needs a driver >= 580).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
out="${OUT:-/tmp/rollstream-gpu}"
mkdir -p "$out"
stages="${STAGES:-build check arch bench}"
rel=kernels/build/Release
lib="$rel/librollstream_cuda.so"
cpu="$rel/librollstream_cpu.so"
mkdir -p "$rel"
t_start=$(date +%s)
stamp() { echo "[run.sh +$(( $(date +%s) - t_start ))s] $*"; }

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
  (command -v nvcc && nvcc --version | tail -2) 2>&1 || echo "no nvcc on PATH"
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| transformers', transformers.__version__)" 2>&1
  nproc
} | tee "$out/env.txt"

if [[ " $stages " == *" build "* ]]; then
  stamp "building (CUDA backend with nvcc, CPU backend with g++, in parallel)"
  # The CPU backend is normally built by node-gyp; plain g++ with the same flags (binding.gyp) works here.
  ( g++ -std=c++17 -O3 -mavx2 -mfma -mf16c -fopenmp -ffp-contract=off -fvisibility=hidden -fexceptions -fPIC -shared -Ikernels \
      kernels/cpu/*.cpp -o "$cpu.tmp" -Wl,-soname,librollstream_cpu.so -lgomp -ldl -lm && mv -f "$cpu.tmp" "$cpu" ) >"$out/build-cpu.txt" 2>&1 &
  cpu_pid=$!
  export PATH="$PATH:/usr/local/cuda/bin"
  ROLLSTREAM_CUDA_JOBS="$(nproc)" bash kernels/cuda/build.sh 2>&1 | tee "$out/build-cuda.txt"
  wait "$cpu_pid" && stamp "CPU backend built" || { stamp "CPU backend build failed (cross-checks skipped)"; tail -20 "$out/build-cpu.txt"; }
fi
if [ ! -f "$lib" ]; then
  stamp "FAIL: $lib does not exist (no nvcc and nothing carried)"
  exit 1
fi

# cuBLAS: the pip wheel that torch uses is not on the loader path; point the backend at it explicitly.
if [ -z "${ROLLSTREAM_CUBLAS:-}" ]; then
  ROLLSTREAM_CUBLAS="$(python3 - <<'EOF'
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
c = []
for d in dirs:
    for sub in ("nvidia/cublas/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"):
        c += glob.glob(os.path.join(d, sub, "libcublas.so.*"))
c += glob.glob("/usr/local/cuda/lib64/libcublas.so.*")
print(sorted(c)[-1] if c else "")
EOF
)"
fi
stamp "ROLLSTREAM_CUBLAS=${ROLLSTREAM_CUBLAS:-<loader path>}"

status=0
if [[ " $stages " == *" check "* ]]; then
  stamp "ABI bindings vs kernels.h"
  python3 kernels/gpu-check/test_abi_signatures.py 2>&1 | tee "$out/abi.txt" || status=1
  stamp "check.py"
  cpu_arg=()
  [ -f "$cpu" ] && cpu_arg=(--cpu "$cpu")
  timeout "${CHECK_TIMEOUT:-240}" python3 -u kernels/gpu-check/check.py --cuda "$lib" --cublas "${ROLLSTREAM_CUBLAS:-}" "${cpu_arg[@]}" ${CHECK_ARGS:-} 2>&1 | tee "$out/check.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || status=1
  if [ "$rc" -ne 0 ] && grep -q "illegal\|misaligned\|launch failure" "$out/check.txt"; then
    stamp "a kernel faulted: rerunning the kernel checks with --sync (rs_settings.cuda_sync) to name it"
    timeout 120 python3 -u kernels/gpu-check/check.py --cuda "$lib" --cublas "${ROLLSTREAM_CUBLAS:-}" --sync --skip-models 2>&1 | tail -60 | tee "$out/check-sync.txt"
  fi
  stamp "nccl_check.py (learner ranks: NCCL reduce-scatter / all-gather / all-reduce; 2 ranks when 2 GPUs)"
  timeout 180 python3 -u kernels/gpu-check/nccl_check.py "$lib" 2>&1 | tee "$out/nccl.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  stamp "engine_check.py (step-level engine, paged attention)"
  timeout 120 python3 -u kernels/gpu-check/engine_check.py "$lib" 2>&1 | tee "$out/engine.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [[ " $stages " == *" arch "* ]]; then
  stamp "hf_arch_check.py (qwen3, qwen3_moe, glm4_moe vs the device's transformers, CPU and CUDA backends)"
  cpu_arg=()
  [ -f "$cpu" ] && cpu_arg=(--cpu "$cpu")
  timeout "${ARCH_TIMEOUT:-180}" python3 -u kernels/gpu-check/hf_arch_check.py --cuda "$lib" --cublas "${ROLLSTREAM_CUBLAS:-}" "${cpu_arg[@]}" ${ARCH_ARGS:-} 2>&1 | tee "$out/arch.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [[ " $stages " == *" bench "* ]]; then
  stamp "bench.py"
  timeout "${BENCH_TIMEOUT:-300}" python3 -u kernels/gpu-check/bench.py --cuda "$lib" --cublas "${ROLLSTREAM_CUBLAS:-}" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
stamp "done (status $status); logs in $out"
exit "$status"
