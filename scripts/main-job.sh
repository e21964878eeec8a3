#!/usr/bin/env bash
# The main job: compile the bundled GPT example with ZeRO-3 for 2 ranks and
# train it on 2 CPU ranks.
#   1. ds-opt imports it and prints what it found (inputs, parameters, loss,
#      op histogram, FLOPs);
#   2. ds-opt compiles a training step for 2 data-parallel ranks with ZeRO
#      stage 3 (autodiff, AdamW, parameter/gradient/state partitioning,
#      memory plan) and automatic recompute for a 3 MiB per-rank device
#      (the least extra FLOPs whose planned peak fits) to
#      build/gpt-train.plan, and prints the per-rank memory and
#      communication report beside the ZeRO formulas and the recompute
#      choice beside none, every-layer and full;
#   3. mpirun -np 2 ds-run trains it for 10 steps on examples/gpt/train.npz
#      (4 global batches of 8 sequences, 4 per rank), saving a sharded
#      checkpoint;
#   4. ds-run --consolidate merges the checkpoint into whole weights.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
OUT="${DS_OUT:-$BUILD}" # where the plan, checkpoint and weights go
EX="$ROOT/examples/gpt"
# Root in a container needs --allow-run-as-root; 2 ranks on fewer cores
# need --oversubscribe.
MPIRUN="${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}"
echo "== ds-opt: what the model holds"
"$BUILD/bin/ds-opt" "$EX/gpt.onnx" --emit=summary
echo "== ds-opt: compile a ZeRO-3 training step (AdamW, automatic recompute) for 2 ranks to $OUT/gpt-train.plan"
"$BUILD/bin/ds-opt" "$EX/gpt.onnx" --optimizer=adamw --lr=3e-3 --weight-decay=0.01 \
  --world-size=2 --zero=3 --recompute=auto --device-memory=3MiB --report \
  -o "$OUT/gpt-train.plan"
echo "== mpirun -np 2 ds-run: train 10 steps, checkpoint to $OUT/gpt-ckpt"
rm -rf "$OUT/gpt-ckpt"
$MPIRUN -np 2 "$BUILD/bin/ds-run" "$OUT/gpt-train.plan" --steps 10 \
  --data "$EX/train.npz" --save "$OUT/gpt-ckpt" --save-every 5
echo "== ds-run --consolidate: whole weights from the shards"
"$BUILD/bin/ds-run" --consolidate "$OUT/gpt-ckpt" -o "$OUT/gpt-trained.safetensors"
