"""Writes a small MLP regression model whose batch axis is dynamic (the
usual torch.onnx.export with dynamic_axes={..., 0: "batch"}), and a data
file of 8 samples. usage: dyn_batch_model.py OUT.onnx OUT.npz"""
import sys

import numpy as np
import torch

torch.manual_seed(0)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x, y):
        return ((self.fc2(torch.relu(self.fc1(x))) - y) ** 2).mean()


x = torch.randn(2, 6)
y = torch.randn(2, 3)
torch.onnx.export(Mlp(), (x, y), sys.argv[1], input_names=["x", "y"],
                  output_names=["loss"], opset_version=17,
                  training=torch.onnx.TrainingMode.TRAINING,
                  do_constant_folding=False,
                  dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
np.savez(sys.argv[2], x=np.random.randn(8, 6).astype(np.float32),
         y=np.random.randn(8, 3).astype(np.float32))
