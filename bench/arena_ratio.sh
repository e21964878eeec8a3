#!/usr/bin/env bash
# The memory plan's arena against the most bytes live at once (issue 23
# item 7): for the bundled GPT (the README's main job and ZeRO-3 bf16 on 8
# ranks) and the GPT-2-small shape (ZeRO 0-3, bf16, 8 ranks, DeepSpeed's
# 5e8/5e7 buckets and ds-opt's 2e7 defaults; fp32 at ZeRO 0 and 3), prints the arena, the live
# peak, their ratio and ds-opt's wall time. Plan only (no run).
#
#   bench/arena_ratio.sh [--medium]    # --medium: GPT-2-medium too (1.5 GB export)
#
# The exports are cached in build/bench/ (GPT-2-small: about 15 s once).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
mkdir -p "$BUILD/bench"
export_size() { # size -> path
  local out="$BUILD/bench/$1.onnx"
  if [ ! -f "$out" ]; then
    echo "bench: exporting the $1 shape (once)..." >&2
    /usr/bin/python3 "$ROOT/examples/gpt/export_gpt.py" --size "$1" -o "$out" 2>/dev/null
  fi
  echo "$out"
}
row() { # label, ds-opt arguments...
  local label="$1" t0 t1 json
  shift
  t0=$(date +%s.%N)
  json=$("$BUILD/bin/ds-opt" "$@" --report=json -o "$BUILD/bench/arena.plan")
  t1=$(date +%s.%N)
  /usr/bin/python3 -c "
import json, sys
r = json.loads(sys.argv[1])
a, l = r['memory']['arena'], r['peak']['live_bytes']
print('%-52s %12.1f %12.1f %8.4f %8.2f' % (sys.argv[2], a / 1e6, l / 1e6,
      r['peak']['arena_over_live'], float(sys.argv[3])))" "$json" "$label" "$(echo "$t1 - $t0" | bc)"
}
printf '%-52s %12s %12s %8s %8s\n' "plan" "arena MB" "live MB" "ratio" "wall s"
GPT="$ROOT/examples/gpt/gpt.onnx"
row "bundled GPT, main job (ds_config.json, 2 ranks)" "$GPT" --config "$ROOT/examples/ds_config.json" --world-size=2
row "bundled GPT, ZeRO-3 bf16 8 ranks" "$GPT" --optimizer=adamw --precision=bf16 --zero=3 --world-size=8
SMALL=$(export_size gpt2-small)
for z in 0 1 2 3; do
  row "GPT-2-small ZeRO-$z bf16 8 ranks, buckets 5e8/5e7" "$SMALL" --optimizer=adamw --precision=bf16 --zero=$z --world-size=8 \
    --reduce-bucket-size=500000000 --allgather-bucket-size=500000000 --prefetch-bucket-size=50000000
  row "GPT-2-small ZeRO-$z bf16 8 ranks, default buckets" "$SMALL" --optimizer=adamw --precision=bf16 --zero=$z --world-size=8
done
for z in 0 3; do
  row "GPT-2-small ZeRO-$z fp32 8 ranks, default buckets" "$SMALL" --optimizer=adam --zero=$z --world-size=8
done
if [ "${1:-}" = "--medium" ]; then
  MEDIUM=$(export_size gpt2-medium)
  row "GPT-2-medium ZeRO-3 bf16 8 ranks, buckets 5e8/5e7" "$MEDIUM" --optimizer=adamw --precision=bf16 --zero=3 --world-size=8 \
    --reduce-bucket-size=500000000 --prefetch-bucket-size=50000000
  row "GPT-2-medium ZeRO-3 bf16 8 ranks, default buckets" "$MEDIUM" --optimizer=adamw --precision=bf16 --zero=3 --world-size=8
fi
