#!/usr/bin/python3
"""Writes the BatchNormalization models of batchnorm.test to DIR.

    batchnorm_models.py DIR

torch exports (ds.export in training mode; torch.onnx.export in eval mode,
with running statistics that differ from the affine parameters, and with
them equal, which torch's eval export merges) and hand-built ONNX nodes
that ds must refuse: rank-1 input, a scale of the wrong length, one value
per channel in training mode, training outputs before opset 14, extra
outputs in eval mode, two nodes updating the same running statistics."""
import io
import os
import sys
import warnings

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ds  # noqa: E402

warnings.filterwarnings("ignore")
F = TensorProto.FLOAT


class BnMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.bn = torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(
            self.fc2(torch.relu(self.bn(self.fc1(x)))), y)


def torch_models(out):
    torch.manual_seed(0)
    m = BnMlp()
    x, y = torch.randn(4, 8), torch.tensor([0, 2, 1, 0])
    ds.export(m, {"x": x, "y": y}, os.path.join(out, "train.onnx"))
    for merged in (True, False):
        if not merged:
            with torch.no_grad():
                m.bn.running_mean.uniform_(-1, 1)
                m.bn.running_var.uniform_(0.5, 2)
        buf = io.BytesIO()
        torch.onnx.export(m.eval(), (x, y), buf, opset_version=17, input_names=["x", "y"],
                          output_names=["loss"], do_constant_folding=False)
        name = "eval-merged.onnx" if merged else "eval.onnx"
        onnx.save(onnx.load_from_string(buf.getvalue()), os.path.join(out, name))
    bn = torch.nn.BatchNorm1d(4, momentum=None)
    try:
        ds.export(torch.nn.Sequential(bn), {"input": torch.randn(3, 4)},
                  os.path.join(out, "cma.onnx"))
    except ValueError as e:
        print(e)


def node_model(out, name, x_shape, opset=17, c=3, outputs=1, training=1, twice=False):
    ins = ["x", "g", "b", "mean", "var"]
    outs = ["y", "m", "v", "sm", "sv"][:outputs]
    attrs = {"training_mode": training} if opset >= 14 else {}
    nodes = [helper.make_node("BatchNormalization", ins, outs, name="bn", **attrs)]
    graph_out = [helper.make_tensor_value_info("y", F, x_shape)]
    if twice:
        nodes.append(helper.make_node("BatchNormalization", ["y", "g", "b", "mean", "var"],
                                      ["y2"], name="bn2", **attrs))
        graph_out = [helper.make_tensor_value_info("y2", F, x_shape)]
    inits = [numpy_helper.from_array(np.full(c, 1.0, np.float32), n) for n in ins[1:]]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", F, x_shape)],
                          graph_out, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, os.path.join(out, name + ".onnx"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch_models(out)
    node_model(out, "rank1", [3])
    node_model(out, "channels", [2, 3], c=4)
    node_model(out, "one-value", [1, 3, 1, 1])
    node_model(out, "opset13-outputs", [2, 3], opset=13, outputs=5)
    node_model(out, "eval-outputs", [2, 3], training=0, outputs=3)
    node_model(out, "shared-stats", [2, 3], twice=True)


if __name__ == "__main__":
    main()
