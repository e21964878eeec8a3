#!/usr/bin/python3
"""Checks ds-run --save-weights' three formats against each other."""
import json
import os
import struct
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

work, original = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(original)))
import export_gpt  # noqa: E402

m = onnx.load(os.path.join(work, "w.onnx"))
onnx.checker.check_model(m)
w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
n = np.load(os.path.join(work, "w.npz"))
b = open(os.path.join(work, "w.safetensors"), "rb").read()
hl = struct.unpack("<Q", b[:8])[0]
header = json.loads(b[8:8 + hl])
s = {k: np.frombuffer(b[8 + hl + v["data_offsets"][0]:8 + hl + v["data_offsets"][1]],
                      np.float32).reshape(v["shape"]) for k, v in header.items()}
orig = {t.name: numpy_helper.to_array(t) for t in onnx.load(original).graph.initializer}
same = all(np.array_equal(w[k], n[k]) and np.array_equal(s[k], n[k]) for k in n.files)
changed = sum(not np.array_equal(orig[k], n[k]) for k in n.files)
model, _, _ = export_gpt.build("tiny")
state = {k: torch.from_numpy(w["wte.weight" if k == "lm_head.weight" else k].copy())
         for k in model.state_dict()}
model.load_state_dict(state)
assert same and changed == 28, (same, changed)
print(f"{len(n.files)} parameters, the same in .onnx, .safetensors and .npz; "
      f"{changed} trainable changed, {len(n.files) - changed} buffers kept; "
      "the .onnx loads into torch")
