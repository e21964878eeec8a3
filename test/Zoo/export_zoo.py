"""Exports every zoo model with ds.export into the folder argv[1] and checks
the record: each initializer is listed once as trainable, frozen or buffer,
the trainable set is the module's parameters that require gradients, and
exporting leaves the module's buffers and the random generator unchanged. Prints one line
per model: name, trainable/frozen/buffer counts and the op types."""

import collections
import json
import os
import sys
import warnings

import torch

warnings.filterwarnings("ignore")
sys.path[:0] = [os.path.dirname(__file__)]
import ds  # noqa: E402
import models  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for name, make in models.ZOO.items():
    model, inputs = make()
    buffers_before = [b.clone() for b in model.buffers()]
    rng_before = torch.get_rng_state()
    proto = ds.export(model, inputs, os.path.join(out, name + ".onnx"))
    meta = {e.key: e.value for e in proto.metadata_props}
    trainable, frozen, buffers = (json.loads(meta[k]) for k in (
        "ds.trainable", "ds.frozen", "ds.buffers"))
    inits = sorted(i.name for i in proto.graph.initializer)
    assert sorted(trainable + frozen + buffers) == inits, name
    wanted = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert sorted(trainable) == wanted, (name, trainable, wanted)
    # Exporting traces the module in training mode; it must leave the
    # running statistics and the random generator as they were.
    for b, b0 in zip(model.buffers(), buffers_before):
        assert torch.equal(b, b0), (name, "a buffer changed")
    assert torch.equal(torch.get_rng_state(), rng_before), (name, "rng")
    ops = sorted({n.op_type for n in proto.graph.node} - {"Constant"})
    print(name, len(trainable), len(frozen), len(buffers), " ".join(ops))
