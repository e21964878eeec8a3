#!/usr/bin/python3
"""Step-0 gradients through one pooling layer, ds (ds-opt --emit-grads +
ds-run) against PyTorch autograd, on the same weights and batch.

Each model is Linear -> ReLU -> reshape to (N, C, spatial...) -> POOL ->
flatten -> Linear -> cross entropy; the ReLU's zeros make windows whose
maximum ties (the gradient goes to the first, as PyTorch). Exported with
torch 1.13 at opset 17 (TRAINING, no constant folding). Tolerance: per
parameter, max |ds - torch| / max |torch| <= 1e-5 (f32 both sides; sums in
another order), and the loss within 1e-5 relative.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TOL = 1e-5

# name: (the pooling, its input's (C, spatial...) shape)
POOLS = {
    "maxpool1d": (lambda: nn.MaxPool1d(3, stride=2, padding=1), (3, 10)),
    "maxpool2d-ceil-dilation": (
        lambda: nn.MaxPool2d(3, stride=2, padding=1, dilation=2, ceil_mode=True), (2, 9, 9)),
    "maxpool2d-global": (lambda: nn.AdaptiveMaxPool2d(1), (4, 5, 5)),
    "maxpool3d": (lambda: nn.MaxPool3d((2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0),
                                       ceil_mode=True), (2, 4, 5, 6)),
    "avgpool2d-exclude-pad": (
        lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                             count_include_pad=False), (2, 8, 9)),
    "avgpool2d-include-pad": (  # exported as Pad, then AveragePool
        lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                             count_include_pad=True), (2, 8, 9)),
    "avgpool1d": (lambda: nn.AvgPool1d(4, stride=3, padding=2, ceil_mode=True,
                                       count_include_pad=False), (3, 11)),
    "avgpool2d-global": (lambda: nn.AdaptiveAvgPool2d(1), (4, 5, 5)),
    "avgpool3d": (lambda: nn.AvgPool3d(2, stride=2, count_include_pad=False), (2, 4, 4, 6)),
}


class Pooled(nn.Module):
    def __init__(self, name):
        super().__init__()
        make, self.shape = POOLS[name]
        size = int(np.prod(self.shape))
        self.inp = nn.Linear(12, size)
        self.pool = make()
        with torch.no_grad():
            pooled = self.pool(torch.zeros(1, *self.shape)).numel()
        self.head = nn.Linear(pooled, 5)

    def forward(self, x, y):
        h = F.relu(self.inp(x)).reshape(-1, *self.shape)
        return F.cross_entropy(self.head(torch.flatten(self.pool(h), 1)), y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", required=True, choices=sorted(POOLS))
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.manual_seed(0)
    rng = np.random.RandomState(5)
    model = Pooled(args.model)
    x = rng.randn(8, 12).astype(np.float32)
    y = rng.randint(0, 5, size=8).astype(np.int64)
    path = os.path.join(args.work, "model.onnx")
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    torch.onnx.export(model, (tx, ty), path, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=["x", "y"], output_names=["loss"])
    loss = model(tx, ty)
    loss.backward()

    feeds = os.path.join(args.work, "in.npz")
    np.savez(feeds, x=x, y=y)
    plan, out = os.path.join(args.work, "grads.plan"), os.path.join(args.work, "out.npz")
    subprocess.run([args.ds_opt, path, "--emit-grads", "-o", plan], check=True)
    subprocess.run([args.ds_run, plan, "--forward-only", "--inputs", feeds, "--outputs", out,
                    "--threads", "2"], check=True, capture_output=True)
    got = np.load(out)
    errors = {"loss": abs(float(got["loss"]) - float(loss)) / abs(float(loss))}
    for name, p in model.named_parameters():
        ref = p.grad.numpy()
        g = got["grad:" + name] if "grad:" + name in got.files else np.full_like(ref, np.nan)
        errors[name] = float(np.max(np.abs(g - ref)) / max(np.max(np.abs(ref)), 1e-30))
    bad = [k for k, e in errors.items() if not e <= TOL]
    for k in bad:
        print(f"FAIL {k}: relative error {errors[k]:.2e}")
    print(f"{args.model}: {len(errors) - 1} parameter gradients, worst relative error "
          f"{max(errors.values()):.2e} (tolerance {TOL:g})")
    print("FAIL" if bad else "PASS")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
