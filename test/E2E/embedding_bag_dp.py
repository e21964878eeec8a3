#!/usr/bin/python3
"""Writes the files of embedding-bag-dp.test into the folder argv[1]: the
zoo's EmbeddingBag classifier (test/Zoo/models.py) exported at half its
batch (16 bags over 48 indices: what each of 2 data-parallel ranks runs)
and with include_last_offset, and global batches as .npz:

  good.npz     the zoo's batch: 32 bags over 96 indices, the first 16
               ending at index 48 (splits evenly over 2 ranks)
  uneven.npz   bag 16 starts at index 49: rank 1's bags do not start at
               its first index
  decreasing.npz  the half batch with bag 2's offset below bag 1's (one
               rank: the kernel's run-time check)
  last.npz     the half batch with include_last_offset's 17 offsets, twice
               (2 ranks)
"""
import os
import sys
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "Zoo"),
                os.path.join(HERE, "..", "..", "python")]
import ds  # noqa: E402
import models  # noqa: E402

warnings.filterwarnings("ignore")
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
model, inputs = models.embedding_bag()
half = {k: v[: v.shape[0] // 2] for k, v in inputs.items()}
ds.export(model, half, os.path.join(out, "half.onnx"))
np.savez(os.path.join(out, "good.npz"),
         **{k: v.numpy() for k, v in inputs.items()})
uneven = {k: v.numpy() for k, v in inputs.items()}
uneven["offsets"] = uneven["offsets"].copy()
uneven["offsets"][16] += 1
np.savez(os.path.join(out, "uneven.npz"), **uneven)
bad = {k: v.numpy() for k, v in half.items()}
bad["offsets"] = bad["offsets"].copy()
bad["offsets"][2] = bad["offsets"][1] - 1
np.savez(os.path.join(out, "decreasing.npz"), **bad)

for b in (model.bag_sum, model.bag_mean, model.bag_max):
    b.include_last_offset = True
n = half["idx"].shape[0]
last = dict(half, offsets=torch.cat([half["offsets"], torch.tensor([n])]))
ds.export(model, last, os.path.join(out, "last.onnx"))
np.savez(os.path.join(out, "last.npz"),
         **{k: np.concatenate([v.numpy()] * 2) for k, v in last.items()})
