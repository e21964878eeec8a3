#!/usr/bin/env bash
# The main job: compile the bundled GPT example and run it.
#   1. ds-opt imports it and prints what it found (inputs, parameters, loss,
#      op histogram, FLOPs);
#   2. ds-opt compiles it to build/gpt.plan (memory plan included);
#   3. ds-run evaluates the forward pass on the bundled inputs.
# It grows into ZeRO-3 + automatic recompute training on 2 ranks as the
# later stages land.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
EX="$ROOT/examples/gpt"
echo "== ds-opt: what the model holds"
"$BUILD/bin/ds-opt" "$EX/gpt.onnx" --emit=summary
echo "== ds-opt: compile to $BUILD/gpt.plan"
"$BUILD/bin/ds-opt" "$EX/gpt.onnx" -o "$BUILD/gpt.plan"
echo "== ds-run: forward pass"
"$BUILD/bin/ds-run" "$BUILD/gpt.plan" --forward-only --inputs "$EX/inputs.npz" \
  --outputs "$BUILD/gpt-outputs.npz"
echo "outputs (logits, loss) written to $BUILD/gpt-outputs.npz"
