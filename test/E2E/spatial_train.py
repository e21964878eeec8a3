#!/usr/bin/python3
"""Six training steps of a tiny UNet-like model built from the spatial ops
(Conv + GroupNorm, reflect-padded Conv, MaxPool, bilinear Upsample,
nearest F.interpolate, replicate padding, InstanceNorm, a concatenated
skip, per-pixel cross entropy), exported with ds.export:

  --variant adam | sgd   ds against torch.optim (Adam; SGD with momentum):
                         each step's loss within 1e-4 relative (f32 both
                         sides; sums in other orders)
  --variant zero1|zero2|zero3
                         ZeRO-1/2/3 on 2 ranks against 1 rank: losses within
                         1e-5 relative (GroupNorm / InstanceNorm are per
                         sample, so a split batch changes nothing but
                         summation order)
  --variant bf16 | fp16  --precision=bf16 (fp16, with the dynamic loss
                         scaler) against torch f32: losses within 2%
                         relative (bf16 keeps 8 mantissa bits)
  --variant recompute    --recompute=full against no recompute: the same
                         losses bit for bit
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import ds  # noqa: E402

STEPS, LR, MOMENTUM = 6, 1e-2, 0.9


class TinyUNet(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect"),
                                 nn.GroupNorm(2, 8), nn.ReLU())
        # No bias before InstanceNorm: its gradient is zero (a per-channel
        # shift is normalized away), and Adam would blow rounding noise up.
        self.mid = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False),
                                 nn.InstanceNorm2d(8, affine=True), nn.ReLU())
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec = nn.Sequential(nn.ReplicationPad2d(1), nn.Conv2d(16, 8, 3),
                                 nn.GroupNorm(4, 8), nn.Tanh())
        self.out = nn.Conv2d(8, classes, 1)

    def forward(self, x, y):
        e = self.enc(x)
        m = self.mid(F.max_pool2d(e, 2))
        u = self.up(m) + F.interpolate(m, scale_factor=2, mode="nearest")
        d = self.dec(torch.cat([u, e], dim=1))
        return F.cross_entropy(self.out(d), y)


def batch(n):
    g = torch.Generator().manual_seed(3)
    return {"x": torch.randn(n, 3, 8, 8, generator=g),
            "y": torch.randint(0, 3, (n, 8, 8), generator=g)}


def run_ds(args, onnx_path, data, tag, flags, prefix=()):
    plan = os.path.join(args.work, tag + ".plan")
    log = os.path.join(args.work, tag + ".json")
    subprocess.run([args.ds_opt, onnx_path, *flags, "-o", plan], check=True)
    subprocess.run([*prefix, args.ds_run, plan, "--steps", str(STEPS), "--data",
                    data, "--log-json", log, "--threads", "1"],
                   check=True, capture_output=True, timeout=600)
    return [json.loads(line)["loss"] for line in open(log)]


def torch_losses(model, inputs, optimizer):
    params = list(model.parameters())
    opt = (torch.optim.Adam(params, lr=LR) if optimizer == "adam" else
           torch.optim.SGD(params, lr=LR, momentum=MOMENTUM))
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = model(**inputs)
        loss.backward()
        opt.step()
        out.append(float(loss))
    return out


def compare(name, got, want, tol):
    ok = len(got) == len(want) == STEPS
    worst = max((abs(a - b) / abs(b) for a, b in zip(got, want)), default=1.0)
    print(f"{name}: losses {' '.join('%.6f' % v for v in got)}")
    print(f"{name}: reference {' '.join('%.6f' % v for v in want)}")
    print(f"{name}: {STEPS} steps, worst loss rel error {worst:.1e} (tol {tol:g})")
    ok &= worst <= tol
    print("PASS" if ok else "FAIL")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--work", required=True)
    ap.add_argument("--variant", required=True,
                    choices=["adam", "sgd", "zero1", "zero2", "zero3", "bf16",
                             "fp16", "recompute"])
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.manual_seed(0)
    model = TinyUNet()
    inputs = batch(4)
    path = os.path.join(args.work, "unet.onnx")
    ds.export(model, inputs, path)
    data = os.path.join(args.work, "data.npz")
    np.savez(data, **{k: v.numpy() for k, v in inputs.items()})
    opt = "sgd" if args.variant == "sgd" else "adam"
    flags = [f"--optimizer={opt}", f"--lr={LR}"]
    if opt == "sgd":
        flags.append(f"--momentum={MOMENTUM}")
    v = args.variant
    if v in ("adam", "sgd"):
        got = run_ds(args, path, data, v, flags)
        ok = compare(f"tiny-unet/{v}", got, torch_losses(model, inputs, opt), 1e-4)
    elif v in ("bf16", "fp16"):
        got = run_ds(args, path, data, v, flags + [f"--precision={v}"])
        ok = compare(f"tiny-unet/{v}", got, torch_losses(model, inputs, opt), 2e-2)
    elif v == "recompute":
        want = run_ds(args, path, data, "plain", flags)
        got = run_ds(args, path, data, v, flags + ["--recompute=full"])
        ok = compare("tiny-unet/recompute", got, want, 0.0)
    else:
        half = os.path.join(args.work, "unet2.onnx")
        torch.manual_seed(0)
        ds.export(TinyUNet(), batch(2), half)
        want = run_ds(args, path, data, "one", flags)
        got = run_ds(args, half, data, v,
                     flags + ["--world-size=2", f"--zero={v[-1]}"],
                     prefix=args.mpirun.split() + ["-np", "2"])
        ok = compare(f"tiny-unet/{v}", got, want, 1e-5)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
