#!/usr/bin/env bash
# Configures and builds ds in build/ (Release, clang-22, ninja, ccache).
# Usage: scripts/build.sh [extra cmake -D options]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"

# ccache keys on paths relative to the source root, so a clone in another
# folder hits the same cache.
export CCACHE_BASEDIR="$ROOT"
export CCACHE_NOHASHDIR=true
export CCACHE_COMPILERCHECK=content

if [ ! -f "$BUILD/build.ninja" ]; then
  echo "build: configuring $BUILD"
  cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "$@"
fi
echo "build: compiling (this takes a few minutes the first time)"
cmake --build "$BUILD"
cmake --build "$BUILD" --target ds-doc
if command -v ccache >/dev/null; then ccache -s 2>/dev/null | grep -iE 'hits|misses' | head -3 || true; fi
