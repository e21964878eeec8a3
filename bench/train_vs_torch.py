#!/usr/bin/python3
"""One training step (forward, backward, Adam) of a GPT with d=256, 4
layers, T=128: ds-run against PyTorch eager on the same weights, batch and
thread count, in one invocation.

Prints the median step times, their ratio, and each side's achieved
GFLOP/s counting 6 * params * tokens + 12 * layers * d * T^2 per sequence
(REFERENCES.md), against OpenBLAS sgemm's peak measured in the same run.

    bench/train_vs_torch.py [--threads 2] [--steps 12]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper
    import export_gpt
    from forward_vs_torch import blas_of_this_process, sgemm_peak

    torch.set_num_threads(args.threads)
    work = os.path.join(args.build, "bench")
    os.makedirs(work, exist_ok=True)
    vocab, block, layers, heads, d, batch, seq = export_gpt.SIZES["train"]
    path = os.path.join(work, "gpt-train.onnx")
    model, idx, targets = export_gpt.build("train")
    if not os.path.exists(path):
        export_gpt.export(model, idx, targets, path)
    weights = export_gpt.load_onnx_weights(model, path)
    nparams = sum(p.numel() for p in model.parameters())
    tokens = batch * seq
    flops = 6 * nparams * tokens + 12 * layers * d * seq * seq * batch
    peak = sgemm_peak(args.threads)
    print(f"threads: {args.threads}; torch {torch.__version__}, BLAS loaded: {blas_of_this_process()}")
    print(f"OpenBLAS sgemm peak (numpy, 1024^3, same threads): {peak:.1f} GFLOP/s")
    print(f"GPT: vocab {vocab}, {layers} layers, d={d}, {heads} heads, batch {batch} x {seq} tokens, "
          f"{nparams} parameters; {flops / 1e9:.2f} GFLOP per step")

    data = os.path.join(work, "train-data.npz")
    np.savez(data, idx=idx.numpy(), targets=targets.numpy())
    plan = os.path.join(work, "gpt-train.plan")
    log = os.path.join(work, "train-log.json")
    subprocess.run([os.path.join(args.build, "bin", "ds-opt"), path, "--optimizer=adam",
                    "--lr=1e-3", "-o", plan], check=True)
    time.sleep(0.5)
    out = subprocess.run([os.path.join(args.build, "bin", "ds-run"), plan,
                          "--steps", str(args.steps + 1), "--data", data,
                          "--log-json", log, "--threads", str(args.threads)],
                         check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in open(log)]
    ds_ms = statistics.median(r["time_ms"] for r in rows[1:])
    ds_losses = [r["loss"] for r in rows]

    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    time.sleep(0.5)
    times, losses = [], []
    for i in range(args.steps + 1):
        t = time.perf_counter()
        opt.zero_grad()
        _, loss = model(idx, targets)
        loss.backward()
        opt.step()
        if i:
            times.append((time.perf_counter() - t) * 1e3)
        losses.append(float(loss))
    torch_ms = statistics.median(times)
    print(f"losses step 1..3: torch {losses[0]:.6f} {losses[1]:.6f} {losses[2]:.6f}; "
          f"ds {ds_losses[0]:.6f} {ds_losses[1]:.6f} {ds_losses[2]:.6f}")
    print(f"torch eager training step (Adam), median of {len(times)}: {torch_ms:8.2f} ms, "
          f"{flops / torch_ms / 1e6:6.1f} GFLOP/s = {flops / torch_ms / 1e6 / peak:.2f} of peak")
    print(f"ds-run training step (Adam), median of {len(rows) - 1}:      {ds_ms:8.2f} ms, "
          f"{flops / ds_ms / 1e6:6.1f} GFLOP/s = {flops / ds_ms / 1e6 / peak:.2f} of peak")
    print(f"ratio ds-run / torch: {ds_ms / torch_ms:.2f} ({'ds-run faster' if ds_ms < torch_ms else 'ds-run slower'})")


if __name__ == "__main__":
    main()
