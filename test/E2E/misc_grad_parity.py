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
  topk          torch.topk's values (largest along the features, smallest
                along the batch) and its indices through torch.gather (no
                gradient through the indices)
  ebag-*        nn.EmbeddingBag with 2-D input (bags of 5): sum, sum with
                per_sample_weights, mean, max (ds.embedding_bag with
                constant bounds)
  bagoff-*      nn.EmbeddingBag with 1-D indices and an offsets input
                (ds.embedding_bag, run-time bounds): 6 bags of lengths
                3, 0, 5, 1, 7, 4 (an empty one; repeated rows), sum, sum
                with per_sample_weights, mean, max, and sum with
                include_last_offset
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


class TopKNet(nn.Module):
    """TopK values (largest along the features, smallest along the batch)
    and its indices used by a gather (MoE-style routing)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(12, 16)
        self.other = nn.Linear(12, 16)
        self.head = nn.Linear(4 + 4 + 16, 5)

    def forward(self, x, y):
        h = torch.tanh(self.inp(x))
        v, idx = torch.topk(h, 4, dim=1)
        w, _ = torch.topk(h, 3, dim=0, largest=False)
        routed = torch.gather(self.other(x), 1, idx)
        z = torch.cat([v, routed, w.sum(0, keepdim=True).expand(h.shape[0], 16)], 1)
        return F.cross_entropy(self.head(z), y)


class EmbeddingBagNet(nn.Module):
    """nn.EmbeddingBag on 2-D input (bags of one length), as torch exports
    it: a Loop over the bags, one ds.embedding_bag in ds."""

    def __init__(self, mode, weighted):
        super().__init__()
        self.bag = nn.EmbeddingBag(20, 8, mode=mode)
        self.weighted = weighted
        self.head = nn.Linear(8, 5)

    def forward(self, idx, y, psw=None):
        h = self.bag(idx, per_sample_weights=psw)
        return F.cross_entropy(self.head(torch.tanh(h)), y)


def ebag(mode, weighted=False):
    return lambda: EmbeddingBagNet(mode, weighted)


class OffsetsBagNet(nn.Module):
    """nn.EmbeddingBag with 1-D indices and an offsets input."""

    def __init__(self, mode, weighted, last):
        super().__init__()
        self.bag = nn.EmbeddingBag(20, 8, mode=mode, include_last_offset=last)
        self.weighted = weighted
        self.last = last
        self.head = nn.Linear(8, 5)

    def forward(self, idx, offsets, y, psw=None):
        h = self.bag(idx, offsets, per_sample_weights=psw)
        return F.cross_entropy(self.head(torch.tanh(h)), y)


def bagoff(mode, weighted=False, last=False):
    return lambda: OffsetsBagNet(mode, weighted, last)


# name: (module factory, input features, classes, batch, tolerance)
MODELS = {
    "double-const": (DoubleConst, 12, 5, 8, TOL),
    "einsum": (EinsumNet, (3, 8), 5, 4, TOL),
    "topk": (TopKNet, 12, 5, 8, TOL),
    "ebag-sum": (ebag("sum"), None, 5, 6, TOL),
    "ebag-sum-weighted": (ebag("sum", True), None, 5, 6, TOL),
    "ebag-mean": (ebag("mean"), None, 5, 6, TOL),
    "ebag-max": (ebag("max"), None, 5, 6, TOL),
    "bagoff-sum": (bagoff("sum"), None, 5, 6, TOL),
    "bagoff-sum-weighted": (bagoff("sum", True), None, 5, 6, TOL),
    "bagoff-mean": (bagoff("mean"), None, 5, 6, TOL),
    "bagoff-max": (bagoff("max"), None, 5, 6, TOL),
    "bagoff-last": (bagoff("sum", last=True), None, 5, 6, TOL),
}

# bagoff-*: the bags' lengths (an empty one) over 20 indices.
BAG_LENGTHS = [3, 0, 5, 1, 7, 4]


def setup(which, work):
    torch.manual_seed(0)
    rng = np.random.RandomState(5)
    make, n_in, classes, batch, tol = MODELS[which]
    model = make()
    y = rng.randint(0, classes, size=batch).astype(np.int64)
    if which.startswith("bagoff"):
        n = sum(BAG_LENGTHS)
        offsets = np.cumsum([0] + BAG_LENGTHS)
        feeds = {"idx": rng.randint(0, 20, size=n).astype(np.int64),
                 "offsets": (offsets if model.last else offsets[:-1]).astype(
                     np.int64), "y": y}
        if model.weighted:
            feeds["psw"] = rng.rand(n).astype(np.float32)
    elif which.startswith("ebag"):
        # Bags of 5 indices into 20 rows: repeats within a bag (max mode's
        # ties are then one row: its gradient is the same either way).
        feeds = {"idx": rng.randint(0, 20, size=(batch, 5)).astype(np.int64),
                 "y": y}
        if model.weighted:
            feeds["psw"] = rng.rand(batch, 5).astype(np.float32)
    else:
        n_in = n_in if isinstance(n_in, tuple) else (n_in,)
        feeds = {"x": rng.randn(batch, *n_in).astype(np.float32), "y": y}
    path = os.path.join(work, which + ".onnx")
    tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
    ds.export(model, tensors, path)
    forward = lambda: model(**tensors)
    return model, path, feeds, forward, tol


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--ds-opt", "--ds-run", "--work"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--model", required=True, choices=list(MODELS))
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model, path, feeds, forward, tol = setup(args.model, args.work)
    sys.exit(0 if grad_parity.check(args.model, model, path, feeds, forward,
                                    args, tol) else 1)


if __name__ == "__main__":
    main()
