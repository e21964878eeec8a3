#!/usr/bin/env bash
# 3D parallelism, plan only (issue 11): the GPT-2-medium shape (24 layers,
# d = 1024, 16 heads, vocabulary 50257; 355M parameters) on 8 ranks, a
# global batch of 8 x 1024 tokens per step, bf16, Adam. For each
# (DP, TP, PP) the per-rank memory of the plan (with pipeline parallelism
# the parameter and state columns are the largest stage's, or model
# chunk's with the interleaved schedule, and the peak is the largest
# rank's: its chunks' arenas, parameters and state, and activation stash), the cost model's step time, and for a pipeline the schedule's
# bubble beside (p-1)/(m+p-1); ratios against (8, 1, 1) in the same run.
# Rows marked "sp" add --sequence-parallel.
# A pipeline of P stages takes the step in M micro-batches of
# 8 / (DP x M) sequences each (M = 4 for P = 2, 8 for P = 4), with each
# schedule (interleaved with 2 model chunks per rank).
#
#   bench/parallel_gpt2_medium.sh
#
# bf16, not fp16: pipeline plans do not take fp16 loss scaling yet, and
# every row uses the same precision.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
MODEL="$BUILD/bench/gpt2-medium-dynamic.onnx"
mkdir -p "$BUILD/bench"
if [ ! -f "$MODEL" ]; then
  echo "bench: exporting the GPT-2-medium shape with dynamic batch and length (once)..."
  /usr/bin/python3 "$ROOT/examples/gpt/export_gpt.py" --size gpt2-medium --dynamic -o "$MODEL" 2>/dev/null
fi
GLOBAL=8 T=1024 WORLD=8
printf "%-24s %12s %12s %12s %10s %8s %8s %10s\n" "(DP,TP,PP) sched" "params MiB" "state MiB" "peak MiB" "step ms" "bubble" "formula" "vs (8,1,1)"
base=""
for grid in "8 1 1 -" "4 2 1 -" "4 2 1 - sp" "2 4 1 -" "2 4 1 - sp" \
            "2 2 2 gpipe" "2 2 2 1f1b" "2 2 2 1f1b sp" "2 2 2 interleaved:2" \
            "1 2 4 gpipe" "1 2 4 1f1b" "1 2 4 1f1b sp" "1 2 4 interleaved:2"; do
  set -- $grid
  dp=$1 tp=$2 pp=$3 sched=$4 sp=${5:-}
  spflag=${sp:+--sequence-parallel}
  if [ "$pp" = 1 ]; then
    b=$((GLOBAL / dp))
    out=$("$BUILD/bin/ds-opt" "$MODEL" --input-shape=idx:${b}x${T} --input-shape=targets:${b}x${T} \
      --optimizer=adam --precision=bf16 --world-size=$WORLD --tensor-parallel=$tp $spflag \
      --report -o "$BUILD/bench/par-$dp-$tp-$pp$sp.plan")
    params=$(echo "$out" | awk '/^  parameters / { print $2 / 1048576; exit }')
    state=$(echo "$out" | awk '/^  optimizer state / { print $3 / 1048576; exit }')
    peak=$(echo "$out" | awk '/^  total per rank / { print $4 / 1048576; exit }')
    step=$(echo "$out" | sed -n 's/.*): step \([0-9.]*\) ms.*/\1/p' | head -1)
    bubble="-" formula="-"
  else
    m=$(( pp == 2 ? 4 : 8 ))
    b=$((GLOBAL / (dp * m)))
    out=$("$BUILD/bin/ds-opt" "$MODEL" --input-shape=idx:${b}x${T} --input-shape=targets:${b}x${T} \
      --optimizer=adam --precision=bf16 --world-size=$WORLD --tensor-parallel=$tp $spflag \
      --pipeline-parallel=$pp --micro-batches=$m --schedule=$sched \
      --report -o "$BUILD/bench/par-$dp-$tp-$pp-${sched%%:*}$sp.plan")
    # The largest stage's parameters and state (stage plans' footprints).
    params=$(echo "$out" | awk '/^  parameters / { if ($2 > p) p = $2 } END { print p / 1048576 }')
    state=$(echo "$out" | awk '/^  optimizer state / { if ($3 > s) s = $3 } END { print s / 1048576 }')
    peak=$(echo "$out" | sed -n 's/^  per-rank peak \([0-9.]*\) MiB.*/\1/p')
    step=$(echo "$out" | sed -n 's/^  cost model: step \([0-9.]*\) ms.*/\1/p')
    bubble=$(echo "$out" | sed -n 's/^  bubble \([0-9.]*\) (the schedule.*/\1/p')
    formula=$(echo "$out" | sed -n 's/.*formula (p-1)\/([a-z0-9*+-]*) = \([0-9.]*\).*/\1/p')
  fi
  [ -z "$base" ] && base=$step
  awk -v g="($dp,$tp,$pp) $sched${sp:+ sp}" -v p="$params" -v s="$state" -v k="$peak" -v t="$step" -v b="$base" \
    -v u="$bubble" -v f="$formula" \
    'BEGIN { printf "%-24s %12.1f %12.1f %12.1f %10.1f %8s %8s %10.2f\n", g, p, s, k, t, u, f, t / b }'
done
