#!/usr/bin/python3
"""Step-0 gradients through BatchNormalization in training mode: ds
(ds-opt --emit-grads + ds-run) against PyTorch's autograd, per parameter
(grad_parity.check).

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


def setup(which, work):
    torch.manual_seed(0)
    rng = np.random.RandomState(5)
    shape = (4,) + MODELS[which][2]
    # Away from mean 0 / variance 1, so that the normalization matters.
    x = (rng.randn(*shape) * 1.7 + 0.4).astype(np.float32)
    y = rng.randint(0, 5, size=4).astype(np.int64)
    features = MODELS[which][0]()(torch.from_numpy(x))[0].numel()
    model = BnNet(which, features)
    # Scale and bias away from 1 and 0, so that their gradients are tested.
    with torch.no_grad():
        if model.bn.affine:
            model.bn.weight.uniform_(0.5, 1.5)
            model.bn.bias.uniform_(-0.5, 0.5)
    path = os.path.join(work, which + ".onnx")
    grad_parity.export(model, (torch.from_numpy(x), torch.from_numpy(y)), path,
                       ["x", "y"])
    feeds = {"x": x, "y": y}
    return model, path, feeds, lambda: model(torch.from_numpy(x),
                                             torch.from_numpy(y))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", required=True, choices=list(MODELS))
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model, path, feeds, forward = setup(args.model, args.work)
    ok = grad_parity.check(args.model, model, path, feeds, forward, args, TOL)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
