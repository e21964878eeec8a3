#!/usr/bin/python3
"""A training export whose parameters outweigh its activations: six
Linear(256, 256) + tanh layers on a batch of 2, a mean squared error.

    wide_mlp.py OUT.onnx
"""
import sys
import warnings

import torch


class WideMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fcs = torch.nn.ModuleList(torch.nn.Linear(256, 256) for _ in range(6))

    def forward(self, x, y):
        for fc in self.fcs:
            x = torch.tanh(fc(x))
        return ((x - y) ** 2).mean()


def main():
    import ds  # ds.export: training mode, no constant folding, the record
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    ds.export(WideMlp().train(), {"x": torch.randn(2, 256), "y": torch.randn(2, 256)},
              sys.argv[1])

if __name__ == "__main__":
    main()
