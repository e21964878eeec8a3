#!/usr/bin/env bash
# ds-run against PyTorch eager, one training step (Adam) of two GPTs and a
# BERT-style encoder, side by side at 1 and 2 threads with torch at its best
# thread set-up (bench/step_vs_torch.py; its flags pass through, e.g.
# --threads 2 --rounds 5 --models gpt-small).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec /usr/bin/python3 "$ROOT/bench/step_vs_torch.py" "$@"
