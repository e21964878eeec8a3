#!/usr/bin/python3
"""Small attention models for fused-attention.test, exported with their
data: a BERT-style encoder (bench/bert_encoder.py: additive padding mask,
ds.export) at T=70 (crossing the CPU kernel's 64-row tiles) and
nn.MultiheadAttention sequence-first (bench/mha_arena.py's model: a
pre-scaled query, rank-3 heads, no mask).

    attention_models.py OUT_DIR    # bert.onnx, bert.npz, mha.onnx, mha.npz
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "python")]

import numpy as np  # noqa: E402
import torch  # noqa: E402

import bert_encoder  # noqa: E402
import ds  # noqa: E402
from mha_arena import Mha  # noqa: E402


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    # vocab, layers, heads, d_model, batch, seq
    bert_encoder.SIZE = (64, 2, 2, 32, 2, 70)
    model, inputs = bert_encoder.build()
    ds.export(model, inputs, os.path.join(out, "bert.onnx"))
    np.savez(os.path.join(out, "bert.npz"), **{k: v.numpy() for k, v in inputs.items()})
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    T, B, d, vocab = 70, 2, 32, 64
    x = rng.randn(T, B, d).astype(np.float32)
    y = rng.randint(0, vocab, size=(T, B)).astype(np.int64)
    torch.onnx.export(Mha(d, 4, vocab), (torch.from_numpy(x), torch.from_numpy(y)),
                      os.path.join(out, "mha.onnx"),
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=["x", "y"], output_names=["loss"])
    np.savez(os.path.join(out, "mha.npz"), x=x, y=y)
    print("exported bert and mha")


if __name__ == "__main__":
    main()
