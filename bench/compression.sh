#!/usr/bin/env bash
# Compressed communication (issue 26, docs/compression.md) on 3 CPU ranks:
# bytes per step and step time of AdamW/1-bit Adam, AdamW/0/1 Adam and
# Lamb/1-bit LAMB; 200-step loss curves of AdamW, 1-bit Adam and 0/1 Adam
# on the bundled GPT; the planner's predicted step at 100 and 10 Gbps;
# 1-bit Adam with freeze_step auto next to AdamW and the freeze at 20
# (DS_BENCH_FREEZE_AUTO_ONLY=1: that section alone, about 2 minutes).
# Usage: bench/compression.sh [RANKS (default 3)]   (a few minutes)
#        DS_BENCH_PLANNER_ONLY=1 bench/compression.sh   (the planner's part,
#        ds-opt only, about 20 s)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
WORK="$BUILD/bench/compression"
mkdir -p "$WORK"
exec /usr/bin/python3 "$ROOT/bench/compression.py" "$BUILD/bin" "$WORK" "${1:-3}" \
  "${DS_MPIRUN:-mpirun --oversubscribe --allow-run-as-root --bind-to none}"
