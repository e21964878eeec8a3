#!/usr/bin/env bash
# 3D parallelism, plan only (issue 11): the GPT-2-medium shape (24 layers,
# d = 1024, 16 heads, vocabulary 50257; 355M parameters) on 8 ranks, batch
# 8 x 1024 per step (global; each data-parallel group takes 8/DP), fp16, Adam. For each
# (DP, TP, PP) that this ds builds, the per-rank memory of the plan and the
# cost model's step time, against (8, 1, 1) in the same run.
#
#   bench/parallel_gpt2_medium.sh
#
# Pipeline parallelism is not built yet: the (2,2,2) and (1,2,4) rows say so.
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
printf "%-12s %14s %14s %14s %12s %12s %10s\n" "(DP,TP,PP)" "params MiB" "opt state MiB" "peak MiB" "step ms" "coll MiB" "vs (8,1,1)"
base=""
for grid in "8 1 1" "4 2 1" "2 4 1" "2 2 2" "1 2 4"; do
  set -- $grid
  dp=$1 tp=$2 pp=$3
  if [ "$pp" != 1 ]; then
    printf "%-12s %s\n" "($dp,$tp,$pp)" "pipeline parallelism is not built yet"
    continue
  fi
  b=$((GLOBAL / dp))
  out=$("$BUILD/bin/ds-opt" "$MODEL" --input-shape=idx:${b}x${T} --input-shape=targets:${b}x${T} \
    --optimizer=adam --precision=fp16 --world-size=$WORLD --tensor-parallel=$tp \
    --report -o "$BUILD/bench/par-$dp-$tp-$pp.plan")
  params=$(echo "$out" | awk '/^  parameters / { print $2; exit }')
  state=$(echo "$out" | awk '/^  optimizer state / { print $3; exit }')
  peak=$(echo "$out" | awk '/^  total per rank / { print $4 / 1048576; exit }')
  step=$(echo "$out" | sed -n 's/.*): step \([0-9.]*\) ms.*/\1/p' | head -1)
  coll=$(echo "$out" | sed -n 's/.*; \([0-9]*\) bytes handed in all.*/\1/p' | head -1)
  [ -z "$base" ] && base=$step
  awk -v g="($dp,$tp,$pp)" -v p="$params" -v s="$state" -v k="$peak" -v t="$step" -v c="$coll" -v b="$base" \
    'BEGIN { printf "%-12s %14.1f %14.1f %14.1f %12.1f %12.1f %10.2f\n", g, p / 1048576, s / 1048576, k, t, c / 1048576, t / b }'
done
