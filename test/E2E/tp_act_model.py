#!/usr/bin/python3
"""Writes the activation MLP of tensor-parallel.test and its data:

    tp_act_model.py OUT.onnx OUT.npz

Two MLP blocks (Linear -> activation -> Linear), exported with ds.export
(torch 1.13, TRAINING, opset 17): the first with GELU (exported as Div, Erf,
Add, Mul), the second with SiLU (Sigmoid, Mul) plus HardSwish and
LeakyRelu (`ds.activation`), so that tensor parallelism must treat every
elementwise op of the hidden width, ds.activation included, as local to
each rank's slice.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python"))
import ds  # noqa: E402


class ActMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up1, self.down1 = nn.Linear(8, 16), nn.Linear(16, 8)
        self.up2, self.down2 = nn.Linear(8, 16), nn.Linear(16, 3)

    def forward(self, x, y):
        h = x + self.down1(F.gelu(self.up1(x)))
        u = self.up2(h)
        a = F.silu(u) + F.hardswish(u) + F.leaky_relu(u, 0.1)
        return F.cross_entropy(self.down2(a), y)


def main():
    onnx_path, npz_path = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 8)).astype(np.float32)
    y = rng.integers(0, 3, 12).astype(np.int64)
    # Batches of 4 rows from the 12 of the data.
    ds.export(ActMlp(), {"x": torch.from_numpy(x[:4]),
                         "y": torch.from_numpy(y[:4])}, onnx_path)
    np.savez(npz_path, x=x, y=y)


if __name__ == "__main__":
    main()
