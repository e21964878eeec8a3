#!/usr/bin/python3
"""The training arena of nn.MultiheadAttention exported sequence-first
(batch_first=False, torch's default), issue 24 item 1: its input projection
is a MatMul of x [T, B, d] with the shared [d, 3d] weight, whose gradient
ds computes as one GEMM over the folded T*B rows (before: a batched
[T, d, 3d] product summed over T, 402,653,184 bytes at T=512, d=256).
Compiles with Adam, prints ds-opt's report lines for the arena, then runs
2 steps and prints ds-run's measured against planned peak.

    /usr/bin/python3 bench/mha_arena.py [--T 512] [--d 256] [--batch 4]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Mha(nn.Module):
    def __init__(self, d, heads, vocab):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.0)
        self.head = nn.Linear(d, vocab)
        self.vocab = vocab

    def forward(self, x, y):
        h, _ = self.attn(x, x, x, need_weights=False)
        return F.cross_entropy(self.head(h).reshape(-1, self.vocab), y.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--build", default=os.environ.get("DS_BUILD_DIR", os.path.join(ROOT, "build")))
    a = ap.parse_args()
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    x = rng.randn(a.T, a.batch, a.d).astype(np.float32)
    y = rng.randint(0, a.vocab, size=(a.T, a.batch)).astype(np.int64)
    work = tempfile.mkdtemp(prefix="mha_arena")
    onnx_path, plan = os.path.join(work, "mha.onnx"), os.path.join(work, "mha.plan")
    torch.onnx.export(Mha(a.d, a.heads, a.vocab), (torch.from_numpy(x), torch.from_numpy(y)),
                      onnx_path, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=["x", "y"], output_names=["loss"])
    np.savez(os.path.join(work, "data.npz"), x=x, y=y)
    print(f"nn.MultiheadAttention batch_first=False: T={a.T} batch={a.batch} d={a.d} "
          f"heads={a.heads} vocab={a.vocab}, Adam fp32")
    bin_ = os.path.join(a.build, "bin")
    rep = subprocess.run([os.path.join(bin_, "ds-opt"), onnx_path, "--optimizer=adam",
                          "-o", plan, "--report"], check=True, capture_output=True, text=True)
    for line in rep.stdout.splitlines():
        if "arena peak" in line or "fullest" in line or line.strip().startswith("live:"):
            print(line)
    run = subprocess.run([os.path.join(bin_, "ds-run"), plan, "--data",
                          os.path.join(work, "data.npz"), "--steps", "2", "--threads", "1"],
                         check=True, capture_output=True, text=True)
    for line in (run.stdout + run.stderr).splitlines():
        if line.startswith(("summary:", "per rank, measured", "trained")):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
