{
  "targets": [
    {
      "target_name": "rds_native",
      "sources": ["tcp_outq.cc", "tcp_keepalive.cc", "unix_sock.cc", "ib_api.cc", "ib_endpoint.cc", "ib_rings.cc", "ib_rdma.cc", "ib.cc", "addon.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS"],
      "cflags_cc": ["-std=c++17", "-fvisibility=hidden", "-O2", "-Wall", "-Wextra"],
      "libraries": ["-ldl"]
    }
  ]
}
