#!/usr/bin/env bash
# Scale without weights (issue 23 item 4): exports GPT-3 175B shapes-only
# (96 layers, d=12288, 96 heads, sequence 2048, vocabulary 50257; no weights,
# docs/planner.md "Models without weights") and times one ds-opt compile of
# a hand layout on 128 nodes of 8 H100-80GB: bf16, TP 8 x PP 16 x DP 8 (1024
# ranks), ZeRO-1, micro-batch 1 x 192 micro-batches (global batch 1536).
# Prints the export and compile wall times, ds-opt's import/pipeline split,
# the peak per rank against 80 GiB and the predicted step. Plan only.
#
#   bench/plan_175b.sh [--llama]    # --llama: Llama-2-70B too (TP 8 x PP 8 x DP 16)
#
# The exports are cached in build/bench/ (the torch exporter is quadratic
# in the graph's nodes: about 5 minutes for gpt3-175b, once).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
mkdir -p "$BUILD/bench"
shapes_only() { # size -> path of its cached shapes-only export
  local out="$BUILD/bench/$1-shapes.onnx" t0=$SECONDS
  [ -f "$out" ] && { echo "$out"; return; }
  echo "bench: exporting $1 shapes-only (once)..." >&2
  /usr/bin/python3 "$ROOT/examples/gpt/export_gpt.py" --size "$1" \
    --shapes-only -o "$out" 2>/dev/null
  echo "bench: export $1: $((SECONDS - t0)) s, $(stat -c %s "$out") bytes" >&2
  echo "$out"
}
compile() { # name model flags...
  local name=$1 model=$2
  shift 2
  local t0 t1
  t0=$(date +%s.%N)
  "$BUILD/bin/ds-opt" "$model" "$@" --import-timing --report=json \
    -o "$BUILD/bench/$name.plan" > "$BUILD/bench/$name.json" 2> "$BUILD/bench/$name.err"
  t1=$(date +%s.%N)
  /usr/bin/python3 - "$name" "$BUILD/bench/$name.json" "$BUILD/bench/$name.err" \
    "$(echo "$t1 - $t0" | bc)" <<'PY'
import json, sys
name, report, err, wall = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
r = json.load(open(report))
lines = open(err).read().split("\n")
imp = next((l for l in lines if l.startswith("import total")), "import total: ?")
pipe = next((l for l in lines if l.startswith("pipeline:")), "pipeline: ?")
peak = r["pipeline"]["per_rank_peak"] if "pipeline" in r else r["memory"]["total"]
p = r.get("predicted", {})
print("%-10s compile %.2f s (%s, %s); peak per rank %.2f GiB (%s 80 GiB); "
      "predicted step %.2f s, MFU %.3f, bottleneck %s" % (
          name, wall, imp, pipe, peak / 2**30,
          "fits" if peak <= 80 * 2**30 else "OVER", p.get("step_time_s", 0),
          p.get("mfu", 0), p.get("bottleneck", "?")))
PY
}
GPT3=$(shapes_only gpt3-175b)
compile gpt3-175b "$GPT3" --optimizer=adam --precision=bf16 --world-size=1024 --tensor-parallel=8 \
  --pipeline-parallel=16 --zero=1 --micro-batches=192 --cluster=h100-80g:128x8
if [ "${1:-}" = "--llama" ]; then
  LLAMA=$(shapes_only llama2-70b)
  compile llama2-70b "$LLAMA" --optimizer=adam --precision=bf16 --world-size=1024 --tensor-parallel=8 \
    --pipeline-parallel=8 --zero=1 --micro-batches=96 --cluster=h100-80g:128x8
fi
