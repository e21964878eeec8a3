#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, builds, then ctest
# (the lit suite, the ONNX node-model import driver, the docs check).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/setup.sh"
bash "$ROOT/scripts/build.sh"
cd "$BUILD"
ctest --output-on-failure --no-tests=error -V
