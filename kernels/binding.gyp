{
  "targets": [
    {
      "target_name": "rollstream_kernels",
      "sources": ["addon/addon.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "."],
      "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_CPP_EXCEPTIONS"],
      "cflags_cc": ["-std=c++17", "-O3"]
    }
  ]
}
