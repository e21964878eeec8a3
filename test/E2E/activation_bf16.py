#!/usr/bin/python3
"""bf16 training through an activation tracks fp32: grad_parity.py's
`act-NAME` model (Linear -> activation -> Linear -> cross entropy) trained
20 steps with AdamW on one batch, fp32 and --precision=bf16; the losses
agree within 2% relative (bf16's 8-bit mantissa over 20 steps, as
bf16.test's bound for GPT) and the bf16 loss falls.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grad_parity  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__)
    for tool in ("ds-opt", "ds-run"):
        ap.add_argument("--" + tool, required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--activation", default="hardswish",
                    choices=list(grad_parity.ACTIVATIONS))
    return ap.parse_args()


def main():
    args = parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.manual_seed(0)
    rng = np.random.RandomState(3)
    x = rng.randn(32, 12).astype(np.float32)
    y = rng.randint(0, 5, size=32).astype(np.int64)
    model = grad_parity.Activation(args.activation)
    path = os.path.join(args.work, "act.onnx")
    grad_parity.export(model, (torch.from_numpy(x), torch.from_numpy(y)), path,
                       ["x", "y"])
    data = os.path.join(args.work, "data.npz")
    np.savez(data, x=x, y=y)
    losses = {}
    for precision in ("fp32", "bf16"):
        plan = os.path.join(args.work, precision + ".plan")
        log = os.path.join(args.work, precision + ".json")
        subprocess.run([args.ds_opt, path, "--optimizer=adamw", "--lr=1e-2",
                        "--precision=" + precision, "-o", plan], check=True)
        subprocess.run([args.ds_run, plan, "--steps", "20", "--data", data,
                        "--log-json", log, "--threads", "2"], check=True,
                       capture_output=True)
        losses[precision] = [json.loads(l)["loss"] for l in open(log)]
    a, b = losses["fp32"], losses["bf16"]
    worst = max(abs(p - q) / abs(p) for p, q in zip(a, b))
    ok = len(a) == len(b) == 20 and worst < 0.02 and b[-1] < b[0]
    print(f"{args.activation}: fp32 {a[0]:.4f} -> {a[-1]:.4f}, "
          f"bf16 {b[0]:.4f} -> {b[-1]:.4f}, worst relative difference {worst:.1e}")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
