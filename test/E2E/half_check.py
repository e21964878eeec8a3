#!/usr/bin/python3
"""Inputs and the f32 numpy reference of gen_models.py's 'half' model.

Tolerances: the f16 softmax output is within 2e-3 absolute (f16 rounds the
matmul result, the layer norm output and the softmax to 11 bits, ~5e-4
each); the bf16 result within 1.6e-2 absolute (bf16 keeps 8 bits: 2^-7 of
values up to 1, for inputs and output rounding).
"""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

work, mode = sys.argv[1], sys.argv[2]
rng = np.random.RandomState(3)
x = rng.randn(4, 8).astype(np.float16)
xf = rng.randn(4, 8).astype(np.float32)
if mode == "write":
    np.savez(os.path.join(work, "in.npz"), x=x, xf=xf)
    sys.exit(0)


def bf16(a):
    """Round f32 to bfloat16 (nearest even) and back."""
    u = a.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.view(np.float32)


w = {t.name: numpy_helper.to_array(t) for t in onnx.load(os.path.join(work, "half.onnx")).graph.initializer}
out = np.load(os.path.join(work, "out.npz"))
h = (x.astype(np.float32) @ w["w"].astype(np.float32)).astype(np.float16)
hb = (h.astype(np.float32) + w["b"].astype(np.float32)).astype(np.float16).astype(np.float32)
ln = (hb - hb.mean(-1, keepdims=True)) / np.sqrt(hb.var(-1, keepdims=True) + 1e-5)
ln = (ln * w["g"].astype(np.float32)).astype(np.float16).astype(np.float32)
e = np.exp(ln - ln.max(-1, keepdims=True))
ref16 = e / e.sum(-1, keepdims=True)
got16 = out["y16"].astype(np.float32)
err16 = float(np.max(np.abs(got16 - ref16)))
g = bf16(bf16(xf) @ bf16(w["wf"]).T)
refb = np.tanh(g)
gotb = (out["yb"].view(np.uint16).astype(np.uint32) << 16).view(np.float32)
errb = float(np.max(np.abs(gotb - refb)))
print(f"f16 softmax: max abs error {err16:.2e} (tolerance 2e-3)")
print(f"bf16 tanh(gemm): max abs error {errb:.2e} (tolerance 1.6e-2)")
ok = err16 <= 2e-3 and errb <= 1.6e-2
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
