#!/usr/bin/python3
"""Reference for `ds-opt --training-info` on gen_models.py's training-info
model: torch autograd gives d loss / d w1, ONNX's Adam rule (R = 0.01,
T = 0 so no bias adjustment, alpha 0.9, beta 0.999, epsilon 1e-8, V and H
the zero initializers, not bound, so fresh each step) updates w1, the only
bound initializer. Checks ds-run's per-step losses (1e-5 relative) and the
final w1 (1e-4 absolute).
"""
import json
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

work, steps = sys.argv[1], int(sys.argv[2])
w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
     for t in onnx.load(os.path.join(work, "ti.onnx")).graph.initializer}
d = np.load(os.path.join(work, "data.npz"))
x, y = torch.from_numpy(d["x"]), torch.from_numpy(d["y"])
w1 = w["w1"].clone().requires_grad_(True)
losses = []
for _ in range(steps):
    h = F.relu(x @ w1.T + w["b1"])
    loss = F.cross_entropy(h @ w["w2"].T + w["b2"], y)
    (g,) = torch.autograd.grad(loss, [w1])
    losses.append(float(loss))
    with torch.no_grad():
        v = (1 - 0.9) * g.double()
        hh = (1 - 0.999) * g.double() ** 2
        w1 = (w1.double() - 0.01 * (v / (hh.sqrt() + 1e-8))).float().requires_grad_(True)
ds = [json.loads(l)["loss"] for l in open(os.path.join(work, "log.json"))]
final = np.load(os.path.join(work, "w.npz"))["w1"]
loss_err = max(abs(a - b) / abs(b) for a, b in zip(ds, losses))
w_err = float(np.max(np.abs(final - w1.detach().numpy())))
print(f"training_info: {steps} steps, worst loss rel error {loss_err:.1e}, final w1 abs error {w_err:.1e}")
ok = len(ds) == steps and loss_err <= 1e-5 and w_err <= 1e-4
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
