#!/usr/bin/env bash
# Fuzz ds's input readers with libFuzzer under ASan and UBSan:
#   onnx    the ONNX importer (any bytes as a model)
#   plan    the plan.bin loader and checker (payloads with a valid header,
#           and raw files)
#   config  ds-opt's DeepSpeed config reader and batch triad
#   npz     the .npz / .npy / TensorProto data readers
#
#   bash scripts/fuzz.sh [SECONDS_EACH=600] [TARGET...]
#
# Builds build-fuzz/ (clang-22, -fsanitize=fuzzer,address,undefined), then
# runs each target for SECONDS_EACH from fuzz/corpus/<target> (new inputs
# that widen coverage go to build-fuzz/corpus-<target>). A crash, leak, hang (>10 s) or UBSan
# report stops the target and leaves the input in fuzz/artifacts/; the
# summary line per target gives executions and coverage. Two targets run at
# a time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECS="${1:-600}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(onnx plan config npz)
B="$ROOT/build-fuzz"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
if [ ! -f "$B/build.ninja" ]; then
  mkdir -p "$B"
  cmake -G Ninja -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDS_ENABLE_CUDA=OFF -DDS_FUZZ_COVERAGE=ON \
    -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > "$B/cmake.log"
fi
ninja -C "$B" $(printf 'ds-fuzz-%s ' "${TARGETS[@]}")
mkdir -p "$ROOT/fuzz/artifacts"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
run() {
  local t="$1"
  # New inputs go to build-fuzz/corpus-<target>; the committed seeds and
  # regression inputs in fuzz/corpus/<target> are read only.
  mkdir -p "$B/corpus-$t"
  "$B/bin/ds-fuzz-$t" "$B/corpus-$t" "$ROOT/fuzz/corpus/$t" -max_total_time="$SECS" \
    -timeout=10 -rss_limit_mb=4096 -max_len=1000000 \
    -artifact_prefix="$ROOT/fuzz/artifacts/$t-" -print_final_stats=1 \
    > "$B/fuzz-$t.log" 2>&1 && status=ok || status=FAILED
  local stats
  stats=$(grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "$B/fuzz-$t.log" | tail -1)
  echo "fuzz $t: $status; $(grep -E 'stat::number_of_executed_units' "$B/fuzz-$t.log" | awk '{print $2}') executions; last: $stats"
}
i=0
for t in "${TARGETS[@]}"; do
  run "$t" &
  i=$((i + 1))
  if [ $((i % 2)) -eq 0 ]; then wait; fi
done
wait
ls "$ROOT/fuzz/artifacts" 2>/dev/null | sed 's/^/artifact: /' || true
