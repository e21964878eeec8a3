#!/usr/bin/python3
"""EmbeddingBag training step: ds-run against torch eager, same threads.

    PYTHONPATH=python bench/embedding_bag_vs_torch.py MODE THREADS WORKDIR

(from the repository root, after the build: build/bin/ds-opt, ds-run).
nn.EmbeddingBag(50000, 64, mode=MODE) with offsets (512 bags of random
lengths over 16384 indices), a linear head and cross entropy; SGD lr 0.01
(a dense update of the table on both sides). Prints the median of 12
steps' time of each."""
import json, os, subprocess, sys, time, warnings
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import ds
mode, threads, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
V, D, B, N = 50000, 64, 512, 16384
torch.set_num_threads(threads)
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.bag = nn.EmbeddingBag(V, D, mode=mode); s.head = nn.Linear(D, 10)
    def forward(s, idx, offsets, y):
        return F.cross_entropy(s.head(s.bag(idx, offsets)), y)
torch.manual_seed(0)
m = M()
lens = np.random.RandomState(0).multinomial(N, [1 / B] * B)
inp = {"idx": torch.randint(0, V, (N,)), "offsets": torch.tensor(np.cumsum([0] + list(lens[:-1]))),
       "y": torch.randint(0, 10, (B,))}
os.makedirs(work, exist_ok=True)
ds.export(m, inp, f"{work}/m.onnx")
np.savez(f"{work}/d.npz", **{k: v.numpy() for k, v in inp.items()})
subprocess.run(["build/bin/ds-opt", f"{work}/m.onnx", "--optimizer=sgd", "--lr=0.01", "-o", f"{work}/m.plan"], check=True)
subprocess.run(["build/bin/ds-run", f"{work}/m.plan", "--steps", "12", "--data", f"{work}/d.npz",
                "--threads", str(threads), "--log-json", f"{work}/log.json"], check=True, capture_output=True)
dsms = sorted(json.loads(l)["time_ms"] for l in open(f"{work}/log.json"))[6]
opt = torch.optim.SGD(m.parameters(), lr=0.01)
ts = []
for _ in range(12):
    t = time.perf_counter(); opt.zero_grad(); m(**inp).backward(); opt.step(); ts.append(1e3 * (time.perf_counter() - t))
print(f"{mode}: ds-run {dsms:.2f} ms, torch {sorted(ts)[6]:.2f} ms, threads {threads}")
