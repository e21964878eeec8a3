#!/usr/bin/env bash
# ds-run against PyTorch eager, one training step of a ResNet-18-shape CNN
# at 32x32 and of an LSTM language model, side by side with the same
# threads (bench/cnn_vs_torch.py; its flags pass through, e.g.
# --threads 2 --rounds 3 --models resnet18-nobn).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec /usr/bin/python3 "$ROOT/bench/cnn_vs_torch.py" "$@"
