#!/usr/bin/python3
"""Step-0 gradients through the spatial ops (Resize / Upsample, Pad in
reflect and edge modes, InstanceNormalization, GroupNorm): ds (ds-opt
--emit-grads + ds-run) against PyTorch's autograd, per parameter
(grad_parity.check).

Models (torch 1.13, TRAINING export, opset 17): a convolution, the op(s)
under test between parameters (so that the op's gradient reaches the
first convolution's weights), a second convolution, a Linear and cross
entropy:
  resize2d  nn.Upsample nearest x2, F.interpolate bilinear x2 (half_pixel),
            F.interpolate bilinear to a size (align_corners)
  resize1d  linear x1.5 (a non-integral scale: 7 -> 10), nearest to a size
  resize3d  trilinear x2, nearest x(1, 2, 2)
  pad       F.pad reflect (asymmetric) and replicate (edge), nn.ReflectionPad2d
  norm      nn.InstanceNorm2d(affine), nn.GroupNorm(2 groups), nn.GroupNorm(1)
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


def resize2d(h):
    h = nn.functional.interpolate(h, scale_factor=2, mode="nearest")
    h = torch.tanh(h)
    h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)
    return F.interpolate(h, size=(7, 9), mode="bilinear", align_corners=True)


def resize1d(h):
    h = F.interpolate(h, scale_factor=1.5, mode="linear")
    return F.interpolate(torch.tanh(h), size=13, mode="nearest")


def resize3d(h):
    h = F.interpolate(h, scale_factor=2, mode="trilinear")
    return F.interpolate(torch.tanh(h), scale_factor=(1, 2, 2), mode="nearest")


def pad(h):
    h = F.pad(h, (2, 1, 1, 3), mode="reflect")
    h = F.pad(torch.tanh(h), (1, 2, 3, 0), mode="replicate")
    return nn.ReflectionPad2d(1)(h)


# name: (conv dims, input shape without the batch, the ops between the convs)
MODELS = {
    "resize2d": (2, (3, 5, 6), resize2d),
    "resize1d": (1, (3, 7), resize1d),
    "resize3d": (3, (2, 3, 4, 3), resize3d),
    "pad": (2, (3, 6, 5), pad),
    "norm": (2, (4, 6, 5), None),
}

CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}


class SpatialNet(nn.Module):
    def __init__(self, which):
        super().__init__()
        dims, shape, self.middle = MODELS[which]
        channels = shape[0]
        self.first = CONV[dims](channels, 4, 3, padding=1)
        self.second = CONV[dims](4, 3, 3, padding=1)
        if which == "norm":
            self.inorm = nn.InstanceNorm2d(4, affine=True)
            self.gnorm = nn.GroupNorm(2, 4)
            self.gnorm1 = nn.GroupNorm(1, 3)
        x = torch.zeros((1,) + shape)
        self.head = nn.Linear(self.features(x)[0].numel(), 5)

    def features(self, x):
        h = torch.tanh(self.first(x))
        if self.middle is not None:
            return torch.tanh(self.second(self.middle(h)))
        h = self.gnorm(torch.tanh(self.inorm(h)))
        return torch.tanh(self.gnorm1(self.second(h)))

    def forward(self, x, y):
        return F.cross_entropy(self.head(self.features(x).flatten(1)), y)


def setup(which, work):
    torch.manual_seed(0)
    rng = np.random.RandomState(5)
    x = rng.randn(*((4,) + MODELS[which][1])).astype(np.float32)
    y = rng.randint(0, 5, size=4).astype(np.int64)
    model = SpatialNet(which)
    # Affine norms start at weight 1, bias 0: move them so that their
    # gradients and the affine terms are tested with other values too.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn(p.shape))
    path = os.path.join(work, which + ".onnx")
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    grad_parity.export(model, (xt, yt), path, ["x", "y"])
    return model, path, {"x": x, "y": y}, lambda: model(xt, yt)


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--ds-opt", "--ds-run", "--work"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--models", nargs="+", choices=list(MODELS),
                    default=list(MODELS))
    args = ap.parse_args()
    failed = []
    root = args.work
    for which in args.models:
        # grad_parity.check writes its files into args.work: one per model.
        args.work = os.path.join(root, which)
        os.makedirs(args.work, exist_ok=True)
        model, path, feeds, forward = setup(which, args.work)
        if not grad_parity.check(which, model, path, feeds, forward, args, TOL):
            failed.append(which)
    print(f"{len(args.models) - len(failed)} of {len(args.models)} models pass"
          + (f"; failed: {' '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
