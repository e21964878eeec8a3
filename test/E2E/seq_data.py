"""The compression tests' data (onebit_adam.py, zero_one_adam.py, zeropp.py,
compressed_pp.py, freeze_auto.py): `rows` arithmetic sequences mod 128 of
33 tokens (a random start in [0, 128) and stride in [1, 8), seed 0), saved
to `path` as idx (the first 32) and targets (the last 32)."""
import numpy as np


def write_sequences(path, rows):
    rng = np.random.RandomState(0)
    start = rng.randint(0, 128, size=(rows, 1))
    stride = rng.randint(1, 8, size=(rows, 1))
    seq = (start + stride * np.arange(33)[None, :]) % 128
    np.savez(path, idx=seq[:, :32], targets=seq[:, 1:])
    return seq
