#!/usr/bin/python3
"""Writes the files of embedding-bag-dp.test into the folder argv[1]: the
zoo's EmbeddingBag classifier (test/Zoo/models.py) exported at half its
batch (3 bags over 6 indices: what each of 2 data-parallel ranks runs) and
with include_last_offset, and global batches as .npz:

  good.npz     the zoo's batch: 6 bags over 12 indices, the first 3 ending
               at index 6 (splits evenly over 2 ranks)
  uneven.npz   bag 3 starts at index 7: rank 1's bags do not start at its
               first index
  decreasing.npz  the half batch with offsets [0, 4, 2] (one rank: the
               kernel's run-time check)
  last.npz     the half batch with include_last_offset's 4 offsets, twice
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
uneven["offsets"] = np.array([0, 2, 6, 7, 7, 9], np.int64)
np.savez(os.path.join(out, "uneven.npz"), **uneven)
bad = {k: v.numpy() for k, v in half.items()}
bad["offsets"] = np.array([0, 4, 2], np.int64)
np.savez(os.path.join(out, "decreasing.npz"), **bad)

for b in (model.bag_sum, model.bag_mean, model.bag_max):
    b.include_last_offset = True
last = dict(half, offsets=torch.tensor([0, 2, 6, 6]))
ds.export(model, last, os.path.join(out, "last.onnx"))
np.savez(os.path.join(out, "last.npz"),
         **{k: np.concatenate([v.numpy()] * 2) for k, v in last.items()})
