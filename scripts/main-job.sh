#!/usr/bin/env bash
# The main job: compile the bundled GPT example and train it.
#   1. ds-opt imports it and prints what it found (inputs, parameters, loss,
#      op histogram, FLOPs);
#   2. ds-opt compiles a training step (autodiff + AdamW, memory plan
#      included) to build/gpt-train.plan;
#   3. ds-run trains it for 10 steps on the bundled batch: the loss goes down.
# It grows into ZeRO-3 + automatic recompute training on 2 ranks as those
# stages land.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
EX="$ROOT/examples/gpt"
echo "== ds-opt: what the model holds"
"$BUILD/bin/ds-opt" "$EX/gpt.onnx" --emit=summary
echo "== ds-opt: compile a training step (AdamW) to $BUILD/gpt-train.plan"
"$BUILD/bin/ds-opt" "$EX/gpt.onnx" --optimizer=adamw --lr=3e-3 --weight-decay=0.01 \
  -o "$BUILD/gpt-train.plan"
echo "== ds-run: train 10 steps"
"$BUILD/bin/ds-run" "$BUILD/gpt-train.plan" --steps 10 --data "$EX/inputs.npz" \
  --save-weights "$BUILD/gpt-trained.npz"
echo "trained weights written to $BUILD/gpt-trained.npz"
