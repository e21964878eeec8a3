#!/usr/bin/python3
"""Import + compile time of ds-opt for test/Zoo's LSTM language model
(2 layers, d=16, batch 4) at several sequence lengths: ds unrolls LSTM/GRU
at import, so the graph grows linearly with the sequence.

    PYTHONPATH=python /usr/bin/python3 bench/lstm_compile.py \
        [--ds-opt build/bin/ds-opt] [--lengths 32 128 512] [--runs 3]

Prints per length: the ds ops after import, the import time (ds-opt
--import-timing), the median wall time of `ds-opt --optimizer=adam -o
plan` (import, autodiff, optimizer, lowering, memory plan, serialize) and
the plan's size.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "test", "Zoo"), os.path.join(HERE, "..", "python")]
import ds  # noqa: E402
import models  # noqa: E402

warnings.filterwarnings("ignore")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", default=os.path.join(HERE, "..", "build", "bin", "ds-opt"))
    ap.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for seq in args.lengths:
            torch.manual_seed(0)
            tokens = torch.randint(0, 50, (4, seq))
            path = os.path.join(tmp, f"lm{seq}.onnx")
            ds.export(models.LstmLM(), {"tokens": tokens,
                                        "labels": torch.roll(tokens, -1, 1)}, path)
            mlir = subprocess.run([args.ds_opt, path, "--emit=mlir"], check=True,
                                  capture_output=True, text=True).stdout
            ops = len(re.findall(r"= ds\.", mlir))
            walls, imports = [], []
            plan = os.path.join(tmp, "plan.bin")
            for _ in range(args.runs):
                t0 = time.perf_counter()
                r = subprocess.run([args.ds_opt, path, "--optimizer=adam", "--import-timing",
                                    "-o", plan], check=True, capture_output=True, text=True)
                walls.append(time.perf_counter() - t0)
                imports.append(float(re.search(r"import total: ([0-9.]+) ms", r.stderr)[1]))
            print(f"seq {seq:4d}: {ops:6d} ds ops after import; import "
                  f"{statistics.median(imports):7.1f} ms; ds-opt --optimizer=adam "
                  f"(import to plan.bin) median {statistics.median(walls):6.2f} s; "
                  f"plan {os.path.getsize(plan) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
