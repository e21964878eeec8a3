#!/usr/bin/env bash
# The CUDA backend on a GPU (issue 8): one prepared script for a machine with
# an NVIDIA GPU (an H200 when the device tool lends one).
#   1. builds (with the CUDA backend) unless build/bin/ds-run is there;
#   2. runs the gpu-labelled tests: every CUDA kernel against its CPU twin,
#      and the GPT example trained on CUDA against the CPU backend;
#   3. benchmarks one training step of the GPT-2-small shape (12 layers,
#      d=768, 12 heads, vocabulary 50257), batch 8 x 1024 tokens, bf16, Adam,
#      world size 1: tokens/s, MFU against the GPU's dense bf16 rate
#      (H200: 989 TFLOP/s; --peak-tflops to change), and PyTorch eager on
#      the same GPU and model for the ratio (when torch has CUDA).
#
#   bench/gpu_gpt2.sh [--steps N] [--peak-tflops T] [--skip-tests]
#
# Figures go to stdout; docs/benchmarks.md keeps them with the date.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS_BUILD_DIR:-$ROOT/build}"
STEPS=10 PEAK=989 TESTS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --peak-tflops) PEAK="$2"; shift 2 ;;
    --skip-tests) TESTS=0; shift ;;
    *) echo "bench: unknown option $1" >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
if [ ! -x "$BUILD/bin/ds-run" ]; then
  echo "bench: building"
  bash "$ROOT/scripts/build.sh"
fi
"$BUILD/bin/ds-run" --list-devices | grep -qx cuda || {
  echo "bench: ds-run sees no CUDA device (built without CUDA, or no GPU)" >&2; exit 1; }
if [ "$TESTS" = 1 ]; then
  echo "== gpu tests"
  (cd "$BUILD" && ctest -L gpu --output-on-failure) || echo "bench: gpu tests FAILED"
fi
W="$BUILD/bench"
mkdir -p "$W"
MODEL="$W/gpt2-small-dynamic.onnx"
if [ ! -f "$MODEL" ]; then
  echo "== exporting the GPT-2-small shape (once)"
  /usr/bin/python3 "$ROOT/examples/gpt/export_gpt.py" --size gpt2-small --dynamic -o "$MODEL" 2>/dev/null
fi
# Random token ids of the GPT-2 vocabulary, enough for the steps.
/usr/bin/python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 50257, 2_000_000, dtype=np.uint16).tofile('$W/tokens.bin')"
echo "== compile: batch 8 x 1024, bf16, Adam, world size 1"
"$BUILD/bin/ds-opt" "$MODEL" --input-shape=idx:8x1024 --input-shape=targets:8x1024 \
  --optimizer=adam --precision=bf16 --report -o "$W/gpt2-bf16.plan" | grep -E "model states|arena peak|total per rank|FLOPs per rank"
echo "== ds-run --backend=cuda, $STEPS steps"
"$BUILD/bin/ds-run" "$W/gpt2-bf16.plan" --backend=cuda --steps "$STEPS" \
  --tokens "$W/tokens.bin" --log-json "$W/ds.json" | tail -3
/usr/bin/python3 - "$W/ds.json" "$PEAK" "$STEPS" <<'PY' > "$W/ds-rate.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]  # the first step warms up
ms = sorted(r["time_ms"] for r in rows)[len(rows) // 2]
tokens = 8 * 1024
psi = 124439808
flops = 6 * psi * tokens + 12 * 12 * 768 * 1024 * 1024 * 8  # + attention
print("%.1f %.2f %.3f" % (tokens / (ms / 1e3), ms, flops / (ms / 1e3) / (float(sys.argv[2]) * 1e12)))
PY
read -r DS_TOK DS_MS DS_MFU < "$W/ds-rate.txt"
echo "== PyTorch eager, same model, same shape, bf16 autocast, Adam"
TORCH=$(/usr/bin/python3 - "$ROOT" "$STEPS" <<'PY' 2>/dev/null || echo "unavailable"
import sys, time
sys.path.insert(0, sys.argv[1] + "/examples/gpt")
import torch
if not torch.cuda.is_available():
    print("unavailable")
    sys.exit(0)
from export_gpt import build
model, _, _ = build("gpt2-small")
model = model.cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
idx = torch.randint(0, 50257, (8, 1024), device="cuda")
tgt = torch.randint(0, 50257, (8, 1024), device="cuda")
times = []
for step in range(int(sys.argv[2])):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _, loss = model(idx, tgt)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
ms = sorted(times[1:])[len(times[1:]) // 2] * 1e3
print("%.1f %.2f" % (8 * 1024 / (ms / 1e3), ms))
PY
)
if [ "$TORCH" = "unavailable" ] || [ -z "$TORCH" ]; then
  echo "bench: PyTorch with CUDA is not available here: no ratio"
else
  read -r PT_TOK PT_MS <<<"$TORCH"
  echo "bench: PyTorch eager bf16 autocast: $PT_TOK tokens/s ($PT_MS ms/step)"
  /usr/bin/python3 -c "print('bench: ds / PyTorch tokens/s ratio %.3f' % ($DS_TOK / $PT_TOK))"
fi
echo "bench: ds GPT-2-small bf16 B=8 T=1024: $DS_TOK tokens/s ($DS_MS ms/step), MFU $DS_MFU of ${PEAK} TFLOP/s"
