{
  # rs_spawn.node: starts a sandbox's bwrap with posix_spawn (clone(CLONE_VM|CLONE_VFORK) in glibc), so that
  # a start costs the caller the same whatever its size; node's spawn forks, copying every page table first.
  "targets": [
    {
      "target_name": "rs_spawn",
      "sources": ["spawn.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-std=gnu++20"],
      "cflags_cc": ["-std=c++17", "-O2", "-fexceptions", "-Wall", "-Wextra"]
    }
  ]
}
