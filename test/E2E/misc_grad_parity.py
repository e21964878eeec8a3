#!/usr/bin/python3
"""Step-0 gradients of the misc family (issue 22) against PyTorch autograd:
ds (ds-opt --emit-grads + ds-run) per parameter, on the same weights and
batch (grad_parity.check). Each model is exported with python/ds's
`ds.export` (torch 1.13, TRAINING, opset 17, no constant folding).

Models:
  double-const  Python float literals that torch exports as DOUBLE scalar
                Constants (torch.clamp(min=), clamp(min, max), clamp_min
                inside F.normalize, torch.where with a scalar) and as FLOAT
                ones (pow 2.0, division by a Python float)
  einsum        attention by einsum ("bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd"),
                a batched matmul, an ellipsis, batch + contraction, an outer
                product, a reduction, three operands, a transpose, an
                implicit output, a diagonal and a trace
Tolerance: per parameter max |ds - torch| / max |torch| <= 1e-5 (f32 both
sides, sums in another order) and the loss within 1e-5 relative, unless a
model states its own below.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
import grad_parity  # noqa: E402
import ds  # noqa: E402

TOL = 1e-5


class DoubleConst(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(12, 16)
        self.head = nn.Linear(16, 5)

    def forward(self, x, y):
        h = self.inp(x)
        a = torch.clamp(h, min=0.1)
        b = torch.clamp(h, min=-0.5, max=0.5)
        c = F.normalize(h, dim=1)
        d = torch.where(h > 0.2, h, 0.3)
        e = h.pow(2.0) / 3.0
        return F.cross_entropy(self.head(a + b + c + d + e), y)


class EinsumNet(nn.Module):
    """Attention by einsum and the other patterns torch code writes."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.w = nn.Parameter(torch.randn(8, 6) * 0.3)
        self.u = nn.Parameter(torch.randn(5) * 0.3)
        self.m = nn.Parameter(torch.randn(6, 6) * 0.3)

    def forward(self, x, y):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 4).permute(2, 0, 3, 1, 4)
        s = torch.einsum("bhqd,bhkd->bhqk", q, k) * 0.5
        o = torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v)
        o = o.transpose(1, 2).reshape(b, t, 8)
        h = torch.einsum("btd,de->bte", o, self.w)          # batched matmul
        h = torch.einsum("...ij,jk->...ik", h, self.m)      # ellipsis
        g = torch.einsum("bte,bte->be", h, h)               # batch + contract
        outer = torch.einsum("i,j->ij", g.mean(0), self.u)  # outer product
        r = torch.einsum("ij->i", outer)                    # reduction
        z = torch.einsum("be,e,ef->bf", g, r, self.m)       # three operands
        z = torch.einsum("bf->fb", z).t()                   # transpose
        z = z + torch.einsum("ji", h[:, 0].t())             # implicit output
        z = z + torch.einsum("ii->i", self.m) + torch.einsum("ii", self.m)
        logits = z[:, :5]                                   # diagonal, trace
        return F.cross_entropy(logits, y)


# name: (module factory, input features, classes, batch, tolerance)
MODELS = {
    "double-const": (DoubleConst, 12, 5, 8, TOL),
    "einsum": (EinsumNet, (3, 8), 5, 4, TOL),
}


def setup(which, work):
    torch.manual_seed(0)
    rng = np.random.RandomState(5)
    make, n_in, classes, batch, tol = MODELS[which]
    model = make()
    n_in = n_in if isinstance(n_in, tuple) else (n_in,)
    x = rng.randn(batch, *n_in).astype(np.float32)
    y = rng.randint(0, classes, size=batch).astype(np.int64)
    feeds = {"x": x, "y": y}
    path = os.path.join(work, which + ".onnx")
    ds.export(model, {k: torch.from_numpy(v) for k, v in feeds.items()}, path)
    forward = lambda: model(torch.from_numpy(x), torch.from_numpy(y))
    return model, path, feeds, forward, tol


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", required=True, choices=list(MODELS))
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model, path, feeds, forward, tol = setup(args.model, args.work)
    ok = grad_parity.check(args.model, model, path, feeds, forward, args, tol)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
