#!/usr/bin/env bash
# Rebuilds the committed prebuilt addon (prebuilds/linux-x64/node.napi.node) with prebuildify.
# Needs a C++ compiler, Node's headers and the rdma-core headers (Debian: libibverbs-dev librdmacm-dev);
# users never run this: the prebuild is committed, and libibverbs/librdmacm are dlopened at run time.
set -euo pipefail
cd "$(dirname "$0")"
# Build against the local Node headers; nothing is downloaded.
export npm_config_nodedir="${npm_config_nodedir:-$(dirname "$(dirname "$(command -v node)")")}"
../node_modules/.bin/prebuildify --napi --strip -t "$(node -p process.versions.node)" --out ..
for f in ../prebuilds/*/node.node; do [ -e "$f" ] && mv -f "$f" "${f%node.node}node.napi.node"; done
rm -rf build
ls -l ../prebuilds/*/
