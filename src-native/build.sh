#!/usr/bin/env bash
# Rebuilds the committed prebuilt addon (prebuilds/linux-<arch>/node.napi.node) with prebuildify.
#   bash src-native/build.sh          # this machine's architecture (linux-x64 here)
#   bash src-native/build.sh arm64    # linux-arm64, cross-compiled with Debian's aarch64 toolchain
# Needs a C++ compiler, Node's headers and the rdma-core headers (Debian: libibverbs-dev librdmacm-dev;
# for arm64 also g++-aarch64-linux-gnu). Users never run this: the prebuilds are committed, and
# libibverbs/librdmacm are dlopened at run time, so nothing is linked against them.
set -euo pipefail
cd "$(dirname "$0")"
arch="${1:-$(node -p process.arch)}"
# Build against the local Node headers (the N-API headers are the same for every architecture);
# nothing is downloaded.
export npm_config_nodedir="${npm_config_nodedir:-$(dirname "$(dirname "$(command -v node)")")}"
if [ "$arch" = arm64 ] && [ "$(node -p process.arch)" != arm64 ]; then
  export CC=aarch64-linux-gnu-gcc CXX=aarch64-linux-gnu-g++ LINK=aarch64-linux-gnu-g++ AR=aarch64-linux-gnu-ar
  export PREBUILD_STRIP_BIN=aarch64-linux-gnu-strip
  # rdma-core's headers are not per architecture: take the host's, searched after the cross
  # toolchain's own system headers so nothing else of the host leaks in.
  inc=$(mktemp -d)
  trap 'rm -rf "$inc"' EXIT
  ln -s /usr/include/infiniband /usr/include/rdma "$inc"/
  export CXXFLAGS="-idirafter $inc"
fi
../node_modules/.bin/prebuildify --napi --strip --arch "$arch" -t "$(node -p process.versions.node)" --out ..
for f in ../prebuilds/*/node.node; do [ -e "$f" ] && mv -f "$f" "${f%node.node}node.napi.node"; done
rm -rf build
ls -l ../prebuilds/*/
