#!/usr/bin/env bash
# npm run lint: Biome's linter over lib, test, bench, fuzz and nemesis (rules in biome.jsonc), Biome's
# formatter in check mode (it reports, it never rewrites: `npx biome format --write` does), and
# clang-format over src-native (sources and headers) when it is installed (.clang-format), and the
# size of every lib/**/*.ts (at most 450 lines). Exits non-zero on any finding.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
biome lint lib test bench fuzz nemesis || status=1
biome format lib test bench fuzz nemesis || status=1
# lib/core holds the kernel's mirrors, lib/core/ext rds-socket's own features (docs/architecture.md).
node scripts/split-core.mjs --check >/dev/null || { echo "lint: lib/core and lib/core/ext do not follow scripts/split-core.mjs (run it)"; status=1; }
# Every lib/**/*.ts at most 450 lines (scripts/check-sizes.mjs).
node scripts/check-sizes.mjs || status=1
if command -v clang-format >/dev/null; then
  clang-format --dry-run -Werror src-native/*.cc src-native/*.h || status=1
else
  echo "lint: clang-format is not installed, src-native was not checked (apt-get install clang-format)"
fi
exit $status
