#!/usr/bin/python3
"""Writes the gen_models.py 'mlp' inputs in every format ds-run reads, or
checks ds-run's outputs against numpy (relative 1e-5: f32 GEMMs)."""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

work = sys.argv[1]
rng = np.random.RandomState(7)
x = rng.randn(4, 8).astype(np.float32)
y = np.array([0, 2, 1, 2], dtype=np.int64)

if len(sys.argv) == 2:
    np.savez(os.path.join(work, "in.npz"), x=x, y=y)
    np.savez_compressed(os.path.join(work, "in_compressed.npz"), x=x, y=y)
    np.save(os.path.join(work, "y.npy"), y)
    for name, a in (("x", x), ("y", y)):
        with open(os.path.join(work, name + ".pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, name).SerializeToString())
    sys.exit(0)

m = onnx.load(os.path.join(work, "mlp.onnx"))
w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
h = np.maximum(x @ w["w1"].T + w["b1"], 0)
logits = h @ w["w2"].T + w["b2"]
logp = logits - logits.max(1, keepdims=True)
logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
ref = -logp[np.arange(4), y].mean()
files = sys.argv[3:]
for f in files:
    got = float(np.load(f)["loss"])
    if abs(got - ref) > 1e-5 * abs(ref):
        print(f"FAIL {f}: loss {got} vs numpy {ref}")
        sys.exit(1)
print(f"{len(files)} output files agree with numpy within 1e-5 (loss {ref:.6f})")
