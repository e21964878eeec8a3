#!/usr/bin/python3
"""Step-0 gradients through BatchNormalization in training mode: ds
(ds-opt --emit-grads + ds-run) against PyTorch's autograd, per parameter
(grad_parity.check); every model of MODELS, or those named.

Models (torch 1.13, TRAINING export, opset 17): a layer without bias (its
weight's gradient carries dX of the BatchNorm), the BatchNorm, tanh, a
Linear head and cross entropy:
  bn1d         Linear + BatchNorm1d on N x C
  bn1d-seq     Conv1d + BatchNorm1d on N x C x L
  bn2d         Conv2d + BatchNorm2d
  bn3d         Conv3d + BatchNorm3d
  bn2d-noaffine  BatchNorm2d(affine=False) (ONNX gets constant scale/bias)
  bn2d-notrack   BatchNorm2d(track_running_stats=False) (the export
                 computes the statistics with other ops and feeds them in)
Tolerance: per parameter max |ds - torch| / max |torch| <= 1e-4 (f32 both
sides; sums in another order), and the loss within 1e-4 relative.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grad_parity  # noqa: E402

TOL = 1e-4

# name: (the layer before, the BatchNorm, the input's shape without the batch)
MODELS = {
    "bn1d": (lambda: nn.Linear(6, 8, bias=False), lambda: nn.BatchNorm1d(8), (6,)),
    "bn1d-seq": (lambda: nn.Conv1d(3, 5, 3, bias=False), lambda: nn.BatchNorm1d(5), (3, 9)),
    "bn2d": (lambda: nn.Conv2d(3, 4, 3, padding=1, bias=False), lambda: nn.BatchNorm2d(4),
             (3, 6, 5)),
    "bn3d": (lambda: nn.Conv3d(2, 3, 3, padding=1, bias=False), lambda: nn.BatchNorm3d(3),
             (2, 4, 3, 5)),
    "bn2d-noaffine": (lambda: nn.Conv2d(3, 4, 3, bias=False),
                      lambda: nn.BatchNorm2d(4, affine=False), (3, 6, 6)),
    "bn2d-notrack": (lambda: nn.Conv2d(3, 4, 3, bias=False),
                     lambda: nn.BatchNorm2d(4, track_running_stats=False), (3, 6, 6)),
}


class BnNet(nn.Module):
    def __init__(self, which, features):
        super().__init__()
        self.pre, self.bn = MODELS[which][0](), MODELS[which][1]()
        self.head = nn.Linear(features, 5)

    def forward(self, x, y):
        h = torch.tanh(self.bn(self.pre(x)))
        return F.cross_entropy(self.head(h.flatten(1)), y)


def check(which, args):
    """One model's step-0 gradients against torch's (grad_parity.check)."""
    torch.manual_seed(0)
    rng = np.random.RandomState(5)
    # Away from mean 0 / variance 1, so that the normalization matters.
    x = (rng.randn(4, *MODELS[which][2]) * 1.7 + 0.4).astype(np.float32)
    y = rng.randint(0, 5, size=4).astype(np.int64)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    model = BnNet(which, MODELS[which][0]()(xt)[0].numel())
    # Scale and bias away from 1 and 0, so that their gradients are tested.
    with torch.no_grad():
        if model.bn.affine:
            model.bn.weight.uniform_(0.5, 1.5)
            model.bn.bias.uniform_(-0.5, 0.5)
    work = os.path.join(args.work, which)
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, which + ".onnx")
    grad_parity.export(model, (xt, yt), path, ["x", "y"])
    sub = argparse.Namespace(ds_opt=args.ds_opt, ds_run=args.ds_run, work=work)
    return grad_parity.check(which, model, path, {"x": x, "y": y},
                             lambda: model(xt, yt), sub, TOL)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for flag in ("--ds-opt", "--ds-run", "--work"):
        ap.add_argument(flag, required=True)
    ap.add_argument("models", nargs="*", default=list(MODELS))
    opts = ap.parse_args()
    results = [check(name, opts) for name in opts.models]
    sys.exit(0 if all(results) else 1)
