#!/usr/bin/env bash
# Recompute on the GPT-2-small shape (12 layers, d=768, 12 heads, vocabulary
# 50257), batch 8 x 1024 tokens, fp16, 1 rank, Adam; plan only (issue 7).
# Prints, for none / every-layer / full and 5 budgets between the full and
# none peaks: the planned per-rank peak, the cost model's activation bytes
# and the extra FLOPs (share of the step), ds-opt's wall time, and the
# recompute pass's own planning time; and the activations beside
# Korthikanti et al.'s per-layer formula sbh(34 + 5as/h) bytes (16-bit, no
# recompute, their tensor and sequence parallel sizes 1).
#
#   bench/recompute_gpt2.sh
#
# The export is cached in build/bench/ (about 1 minute to make).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
MODEL="$BUILD/bench/gpt2-small-dynamic.onnx"
mkdir -p "$BUILD/bench"
if [ ! -f "$MODEL" ]; then
  echo "bench: exporting the GPT-2-small shape with dynamic batch and length (once)..."
  /usr/bin/python3 "$ROOT/examples/gpt/export_gpt.py" --size gpt2-small --dynamic -o "$MODEL" 2>/dev/null
fi
B=8 T=1024
OPT=("$MODEL" --input-shape=idx:${B}x${T} --input-shape=targets:${B}x${T}
     --optimizer=adam --precision=fp16 --report -o "$BUILD/bench/recompute.plan")
compile() { # mode -> prints "peak act flops step_flops wall_s plan_ms"
  local t0 t1 out
  t0=$(date +%s.%N)
  out=$("$BUILD/bin/ds-opt" "${OPT[@]}" --recompute="$1")
  t1=$(date +%s.%N)
  /usr/bin/python3 - "$t0" "$t1" <<PY
import re, sys
out = """$out"""
peak = re.search(r"per-rank peak (\d+) bytes", out).group(1)
m = re.search(r"chosen\s+(\d+)\s+(\d+)", out)
step = re.search(r"step FLOPs (\d+)", out).group(1)
plan = re.search(r"recompute planning .*: ([0-9.]+) ms", out).group(1)
print(peak, m.group(1), m.group(2), step, "%.1f" % (float(sys.argv[2]) - float(sys.argv[1])), plan)
PY
}
echo "bench: $MODEL, batch ${B}x${T}, fp16, Adam, 1 rank, $(nproc) cores, $(date -u +%F)"
printf "%-22s %12s %14s %16s %8s %9s %11s\n" plan "peak MiB" "act. MiB" "extra GFLOPs" "of step" "ds-opt s" "planning ms"
row() {
  read -r peak act flops step wall plan <<<"$2"
  /usr/bin/python3 -c "print('%-22s %12.1f %14.1f %16.1f %7.1f%% %9s %11s' % ('$1', $peak/2**20, $act/2**20, $flops/1e9, 100.0*$flops/$step, '$wall', '$plan'))"
}
none=$(compile none); row none "$none"
full=$(compile full); row full "$full"
row every-layer "$(compile every-layer)"
pn=${none%% *}; pf=${full%% *}
for k in 0 1 2 3 4; do
  b=$(( pf + (pn - pf) * (2 * k + 1) / 10 ))
  row "budget=$(( b / 1048576 ))MiB" "$(compile budget=$b)"
done
# Korthikanti: per layer s*b*h*(34 + 5*a*s/h) bytes.
/usr/bin/python3 - "$none" <<PY
import sys
s, b, h, a, L = 1024, 8, 768, 12, 12
per = s * b * h * (34 + 5 * a * s / h)
act = int(sys.argv[1].split()[1])
print("Korthikanti sbh(34 + 5as/h): %.1f MiB per layer, %.1f MiB for 12 layers; "
      "ds's model without recompute: %.1f MiB (layers, plus cut values, logits "
      "and loss)" % (per / 2**20, L * per / 2**20, act / 2**20))
PY
