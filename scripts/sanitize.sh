#!/usr/bin/env bash
# The end-to-end tests under AddressSanitizer and UndefinedBehaviorSanitizer:
# builds build-asan/ (clang-22, -fsanitize=address,undefined, no CUDA), then
# runs the lit suite's E2E, Target and Import tests with it. Any report
# fails the test that triggered it.
#
#   bash scripts/sanitize.sh [LIT_FILTER=E2E|Target|Import]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
B="$ROOT/build-asan"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
if [ ! -f "$B/build.ninja" ]; then
  mkdir -p "$B"
  cmake -G Ninja -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDS_ENABLE_CUDA=OFF -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > "$B/cmake.log"
fi
ninja -C "$B" ds-opt ds-run
# Open MPI and protobuf keep allocations to exit: leaks are checked by the
# fuzzers, not here. UBSan stops at the first report.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
/usr/lib/llvm-22/bin/lit -sv "$B/test" --filter "${1:-E2E|Target|Import}"
