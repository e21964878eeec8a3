#!/usr/bin/env bash
# Offload benchmarks (issue 12), CPU backend, printed as ratios against a
# reference run in the same invocation:
#  1. the NVMe engine (ds-nvme-bench: io_uring, checksummed slots) against
#     a plain sequential pwrite/pread of the same bytes in the same folder
#     (and dd, for context);
#  2. the host Adam step (--offload-optimizer=cpu: the optimizer kernels run
#     on the host) against the device-side Adam kernel, per parameter, on
#     the GPT-2-small shape (124M parameters, ds-run --profile).
# Usage: bench/offload.sh [FOLDER (default: the build's bench/nvme)] [MiB]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
DIR="${1:-$BUILD/bench/nvme}"
MIB="${2:-512}"
mkdir -p "$DIR" "$BUILD/bench"

echo "== 1. NVMe path: $MIB MiB in $DIR (3 rounds)"
# ds-nvme-bench times its second round (a step reuses its buffers; this
# machine pays for the first kernel access to a user page) and puts it
# beside a plain sequential pwrite/pread of the same buffers in the same
# folder. dd (one reused 1 MiB block) is printed for context.
F="$DIR/dd-bench.bin"
for round in 1 2 3; do
  "$BUILD/bin/ds-nvme-bench" "$DIR" "$MIB" 16 1048576 8 | sed 's/^/  /'
done
dd if=/dev/zero of="$F" bs=1M count="$MIB" 2>&1 | tail -1 | sed 's/^/  dd write: /'
dd if="$F" of=/dev/null bs=1M 2>&1 | tail -1 | sed 's/^/  dd read: /'
rm -f "$F"

echo "== 2. host Adam against device Adam (GPT-2-small shape, 1x64 tokens, fp32)"
MODEL="$BUILD/bench/gpt2-small-dynamic.onnx"
if [ ! -f "$MODEL" ]; then
  echo "bench: exporting the GPT-2-small shape (once)..."
  /usr/bin/python3 "$ROOT/examples/gpt/export_gpt.py" --size gpt2-small --dynamic -o "$MODEL" 2>/dev/null
fi
/usr/bin/python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 50257, 4096).astype(np.uint16).tofile('$BUILD/bench/tokens.bin')"
for mode in none cpu; do
  "$BUILD/bin/ds-opt" "$MODEL" --input-shape=idx:1x64 --input-shape=targets:1x64 \
    --optimizer=adam --offload-optimizer=$mode -o "$BUILD/bench/offload-$mode.plan"
  "$BUILD/bin/ds-run" "$BUILD/bench/offload-$mode.plan" --steps 3 \
    --tokens "$BUILD/bench/tokens.bin" --profile --no-progress-bar > "$BUILD/bench/offload-$mode.txt"
  grep -E "^ *adam |summary" "$BUILD/bench/offload-$mode.txt" | sed "s/^/$mode: /"
done
psi=$("$BUILD/bin/ds-opt" "$MODEL" --input-shape=idx:1x64 --input-shape=targets:1x64 --emit=summary | sed -n 's/.*trainable: [0-9]* tensors, \([0-9]*\) elements.*/\1/p')
awk -v psi="$psi" '
  FNR == 1 { f++ }
  /^ *adam / { ms[f] = $2; calls[f] = $3 }
  END {
    if (!ms[1] || !ms[2]) { print "bench: no adam timing found"; exit 1 }
    printf "Adam per parameter and step: device kernel %.3f ns, host %.3f ns (psi %d); ratio host/device %.2f\n",
      ms[1] / 3 * 1e6 / psi, ms[2] / 3 * 1e6 / psi, psi, ms[2] / ms[1] }' \
  "$BUILD/bench/offload-none.txt" "$BUILD/bench/offload-cpu.txt"
