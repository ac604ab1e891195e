{
  # Two products:
  #   librollstream_cpu.so  - all the math behind the C ABI in kernels.h (also loadable from Python ctypes)
  #   rollstream_kernels.node - the N-API addon; it does NOT link the math, it dlopen()s a backend .so by path
  #                            at run time, so librollstream_cuda.so can drop in with the same header.
  # MPI (the learner ranks' collectives, addon/comm.cc) when mpicc exists at build time; without it the addon
  # builds the same and its comm calls say why they cannot run.
  "variables": {
    "have_mpi": "<!(sh -c 'mpicc --showme:compile >/dev/null 2>&1 && echo 1 || echo 0')"
  },
  "targets": [
    {
      "target_name": "rollstream_cpu",
      "type": "shared_library",
      "product_prefix": "lib",
      "product_dir": "<(PRODUCT_DIR)",
      "sources": [
        "cpu/common.cpp", "cpu/library.cpp", "cpu/blas_dispatch.cpp", "cpu/gemm_router.cpp", "cpu/sgemm.cpp", "cpu/matmul.cpp",
        "cpu/embedding.cpp", "cpu/rmsnorm.cpp", "cpu/rope.cpp", "cpu/qk_norm.cpp", "cpu/attention.cpp", "cpu/swiglu.cpp", "cpu/moe.cpp",
        "cpu/loss.cpp", "cpu/adamw.cpp", "cpu/model.cpp", "cpu/model_forward.cpp", "cpu/model_train.cpp",
        "cpu/model_step.cpp", "cpu/lora.cpp", "cpu/sampling.cpp", "cpu/paged_attention.cpp", "cpu/engine.cpp", "cpu/generate.cpp"
      ],
      "include_dirs": ["."],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17", "-std=gnu++20"],
      # Portable x86-64-v3 (AVX2/FMA/F16C), never -march=native; no FMA contraction behind our back, so the
      # operation order written in the kernels is the one that runs (determinism).
      "cflags_cc": ["-std=c++17", "-O3", "-mavx2", "-mfma", "-mf16c", "-fopenmp", "-ffp-contract=off",
                    "-fvisibility=hidden", "-fexceptions", "-fPIC"],
      "ldflags": ["-fopenmp", "-Wl,--no-undefined", "-Wl,-soname,librollstream_cpu.so"],
      "libraries": ["-lgomp", "-ldl", "-lm"]
    },
    {
      "target_name": "rollstream_kernels",
      "sources": ["addon/addon.cc", "addon/backend.cc", "addon/kernels_api.cc", "addon/model_api.cc", "addon/engine_api.cc",
                  "addon/comm.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "."],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-std=gnu++20"],
      "cflags_cc": ["-std=c++17", "-O2", "-fexceptions"],
      "libraries": ["-ldl"],
      "conditions": [
        ["have_mpi==1", {
          "defines": ["RS_HAVE_MPI"],
          "cflags_cc": ["<!@(mpicc --showme:compile)"],
          "libraries": ["<!@(mpicc --showme:link)"]
        }]
      ]
    }
  ]
}
