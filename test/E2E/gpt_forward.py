#!/usr/bin/python3
"""The GPT example's forward pass through ds-opt + ds-run against PyTorch.

The torch model (examples/gpt/export_gpt.py) is loaded with the weights of
the ONNX file itself, so the comparison does not depend on torch's RNG.
Tolerance: 1e-5 relative (max |ds - torch| / max |torch|) for the logits and
the loss; both compute in f32 with different summation orders (OpenBLAS
sgemm vs torch's GEMM, double accumulation in ds's softmax/LayerNorm).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
import export_gpt  # noqa: E402

TOL = 1e-5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--onnx", default=os.path.join(ROOT, "examples", "gpt", "gpt.onnx"))
    ap.add_argument("--size", default="tiny")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)

    model, idx, targets = export_gpt.build(args.size)
    weights = export_gpt.load_onnx_weights(model, args.onnx)
    model.eval()

    rng = np.random.RandomState(1234)
    vocab = weights["wte.weight"].shape[0]
    idx = rng.randint(0, vocab, size=tuple(idx.shape)).astype(np.int64)
    targets = rng.randint(0, vocab, size=tuple(targets.shape)).astype(np.int64)
    targets[0, :3] = -100  # ignored positions
    with torch.no_grad():
        logits, loss = model(torch.from_numpy(idx), torch.from_numpy(targets))
    inputs = os.path.join(args.work, "inputs.npz")
    np.savez(inputs, idx=idx, targets=targets)

    plan = os.path.join(args.work, "gpt.plan")
    outputs = os.path.join(args.work, "out.npz")
    log = os.path.join(args.work, "log.json")
    subprocess.run([args.ds_opt, args.onnx, "-o", plan], check=True)
    run = subprocess.run([args.ds_run, plan, "--forward-only", "--inputs", inputs,
                          "--outputs", outputs, "--log-json", log, "--threads", "2"],
                         check=True, capture_output=True, text=True)
    print(run.stdout.strip())
    out = np.load(outputs)
    ok = True
    for name, ref in (("logits", logits.numpy()), ("loss", loss.numpy())):
        got = out[name]
        if got.shape != ref.shape:
            print(f"FAIL {name}: shape {got.shape} vs torch {ref.shape}")
            ok = False
            continue
        rel = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
        print(f"{name}: max relative error {rel:.3e} (tolerance {TOL:g})")
        ok &= rel <= TOL
    entry = json.loads(open(log).readline())
    print(f"log: step {entry['step']} loss {entry['loss']:.6f} "
          f"peak {entry['peak_bytes']} planned {entry['planned_bytes']}")
    if entry["peak_bytes"] > entry["planned_bytes"] or \
            abs(entry["loss"] - float(out["loss"])) > 1e-5 * abs(float(out["loss"])):
        print("FAIL log-json disagrees with the outputs or the plan")
        ok = False
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
