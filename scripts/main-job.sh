#!/usr/bin/env bash
# The main job: compile the bundled GPT example. For now ds-opt imports it
# and prints what it found (inputs, parameters, loss, op histogram, FLOPs);
# it grows into ZeRO-3 + automatic recompute training on 2 ranks.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
"$BUILD/bin/ds-opt" "$ROOT/examples/gpt/gpt.onnx" --emit=summary
