#!/usr/bin/env bash
# Import time of a GPT-2-small shaped export (12 layers, d=768, vocabulary
# 50257; 124M parameters, ~550 MB) against a reference in the same run:
# Python's onnx.load of the same file (protobuf parse only, no checks).
# Target (issue 2): ds-opt imports it in under 5 s on the 2-core build machine.
#
#   bench/import_gpt2.sh [RUNS]
#
# The export is cached in build/bench/ (about 1 minute to make).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
RUNS="${1:-3}"
MODEL="$BUILD/bench/gpt2-small.onnx"
mkdir -p "$BUILD/bench"
if [ ! -f "$MODEL" ]; then
  echo "bench: exporting the GPT-2-small shape with PyTorch (once)..."
  /usr/bin/python3 "$ROOT/examples/gpt/export_gpt.py" --size gpt2-small -o "$MODEL" 2>/dev/null
fi
echo "bench: $(du -h "$MODEL" | cut -f1) $MODEL, $RUNS runs each, $(nproc) cores"

ds_ms=()
for i in $(seq "$RUNS"); do
  t=$("$BUILD/bin/ds-opt" "$MODEL" --emit=summary --import-timing 2>&1 >/dev/null |
      awk '/^import total:/ {print $3}')
  ds_ms+=("$t")
done
ref_ms=$(/usr/bin/python3 - "$MODEL" "$RUNS" <<'PY'
import sys, time, onnx
path, runs = sys.argv[1], int(sys.argv[2])
best = []
for _ in range(runs):
    t = time.perf_counter(); onnx.load(path); best.append((time.perf_counter() - t) * 1e3)
best.sort(); print(f"{best[len(best)//2]:.1f}")
PY
)
ds_med=$(printf '%s\n' "${ds_ms[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
"$BUILD/bin/ds-opt" "$MODEL" --emit=summary --import-timing 2>&1 >/dev/null | sed 's/^/  ds-opt /'
awk -v ds="$ds_med" -v ref="$ref_ms" 'BEGIN {
  printf "ds-opt import (checker + shape inference + IR), median: %.0f ms\n", ds
  printf "reference onnx.load (parse only), median:              %.0f ms\n", ref
  printf "ratio ds-opt / onnx.load: %.2f\n", ds / ref
  printf "ratio ds-opt / 5 s target: %.2f (%s)\n", ds / 5000, (ds < 5000 ? "meets target" : "MISSES target")
}'
