#!/usr/bin/python3
"""Step-0 gradients through convolutions: ds (ds-opt --emit-grads + ds-run)
against PyTorch's autograd, per parameter (grad_parity.check).

Models (torch 1.13, TRAINING export, opset 17), each two convolutions, a
Linear and cross entropy, so that the second convolution's input gradient
is exercised too:
  conv1d  strided + padded, then depthwise (groups = channels), no bias
  conv2d  grouped, dilated, asymmetric kernel and pads, then 1x1 strided
  conv3d  strided + dilated, then depthwise
  convt2d ConvTranspose2d (stride 2, output_padding, groups 2), then Conv2d
Tolerance: per parameter max |ds - torch| / max |torch| <= 1e-4 (f32 both
sides; GEMMs sum in another order), and the loss within 1e-4 relative.
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

# name: (the two layers, the input's shape without the batch)
MODELS = {
    "conv1d": (lambda: [nn.Conv1d(3, 8, 5, stride=2, padding=2),
                        nn.Conv1d(8, 8, 3, padding=1, groups=8, bias=False)],
               (3, 17)),
    "conv2d": (lambda: [nn.Conv2d(4, 6, (3, 2), padding=(2, 1), dilation=(2, 1),
                                  groups=2),
                        nn.Conv2d(6, 5, 1, stride=2)],
               (4, 9, 8)),
    "conv3d": (lambda: [nn.Conv3d(2, 4, 3, stride=(1, 2, 1), padding=1,
                                  dilation=(1, 1, 2)),
                        nn.Conv3d(4, 4, 3, padding=1, groups=4)],
               (2, 5, 6, 7)),
    "convt2d": (lambda: [nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                            output_padding=1, groups=2),
                         nn.Conv2d(6, 3, 3, stride=2)],
                (4, 5, 4)),
}


class ConvNet(nn.Module):
    def __init__(self, which, features):
        super().__init__()
        first, second = MODELS[which][0]()
        self.first, self.second = first, second
        self.head = nn.Linear(features, 5)

    def forward(self, x, y):
        h = torch.tanh(self.second(torch.tanh(self.first(x))))
        return F.cross_entropy(self.head(h.flatten(1)), y)


def setup(which, work):
    torch.manual_seed(0)
    rng = np.random.RandomState(5)
    shape = (4,) + MODELS[which][1]
    x = rng.randn(*shape).astype(np.float32)
    y = rng.randint(0, 5, size=4).astype(np.int64)
    first, second = MODELS[which][0]()
    features = second(first(torch.from_numpy(x)))[0].numel()
    model = ConvNet(which, features)
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
