"""Checks ds.export's record of what ONNX loses on a fine-tuning model: a
frozen backbone, a padding_idx embedding tied to the output layer, a float
buffer, dropout (training mode) and inputs given out of signature order."""

import json
import sys

import onnx
import torch
import torch.nn as nn

import ds


class FineTune(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8, padding_idx=3)
        self.backbone = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(8, 11, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("pos", torch.randn(4, 8))
        for p in self.backbone.parameters():
            p.requires_grad_(False)

    def forward(self, ids, labels):
        h = self.emb(ids) + self.pos
        h = self.drop(torch.relu(self.backbone(h)))
        return nn.functional.cross_entropy(self.head(h).reshape(-1, 11),
                                           labels.reshape(-1))


torch.manual_seed(0)
model = FineTune().eval()  # ds.export must trace in training mode anyway
ids = torch.randint(0, 11, (2, 4))
proto = ds.export(model, {"labels": ids.clone(), "ids": ids}, sys.argv[1])
assert not model.training, "ds.export must restore the module's mode"

saved = onnx.load(sys.argv[1])
meta = {e.key: e.value for e in saved.metadata_props}
inits = sorted(i.name for i in saved.graph.initializer)
print("inputs", [i.name for i in saved.graph.input])
print("outputs", [o.name for o in saved.graph.output])
print("initializers", inits)
for key in ("ds.mode", "ds.trainable", "ds.frozen", "ds.buffers",
            "ds.padding_idx"):
    print(key, meta[key])
assert meta["ds.export"].startswith("ds.export 1 (torch ")
ops = {n.op_type for n in saved.graph.node}
assert "Dropout" in ops, ops
# Every float initializer is accounted for exactly once.
listed = (json.loads(meta["ds.trainable"]) + json.loads(meta["ds.frozen"]) +
          json.loads(meta["ds.buffers"]))
assert sorted(listed) == inits, (listed, inits)
