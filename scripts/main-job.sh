#!/usr/bin/env bash
# The main job: compile the bundled GPT example with ZeRO-3 for 2 ranks and
# train it on 2 CPU ranks.
#   1. ds-opt imports it and prints what it found (inputs, parameters, loss,
#      op histogram, FLOPs);
#   2. ds-opt compiles a training step for 2 data-parallel ranks from the
#      DeepSpeed config examples/ds_config.json: ZeRO stage 3 (parameter,
#      gradient and state partitioning), AdamW, bf16 with fp32 master
#      weights, and automatic recompute for a 2 MiB per-rank device (the
#      least extra FLOPs whose planned peak fits), to build/gpt-train.plan,
#      printing the per-rank memory and communication report beside the
#      ZeRO formulas and the recompute choice beside none, every-layer and
#      full;
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
echo "== ds-opt: compile a training step for 2 ranks from $ROOT/examples/ds_config.json (ZeRO-3, bf16, automatic recompute) to $OUT/gpt-train.plan"
"$BUILD/bin/ds-opt" "$EX/gpt.onnx" --config "$ROOT/examples/ds_config.json" \
  --world-size=2 --report -o "$OUT/gpt-train.plan"
echo "== mpirun -np 2 ds-run: train 10 steps, checkpoint to $OUT/gpt-ckpt"
rm -rf "$OUT/gpt-ckpt"
$MPIRUN -np 2 "$BUILD/bin/ds-run" "$OUT/gpt-train.plan" --steps 10 \
  --data "$EX/train.npz" --save "$OUT/gpt-ckpt" --save-every 5
echo "== ds-run --consolidate: whole weights from the shards"
"$BUILD/bin/ds-run" --consolidate "$OUT/gpt-ckpt" -o "$OUT/gpt-trained.safetensors"
