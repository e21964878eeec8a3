#!/usr/bin/python3
"""Frozen parameters and read-only buffers partitioned under ZeRO-3, on a
model whose frozen backbone dominates its weights (test/Zoo's finetune model
with a deeper, wider backbone): a trainable embedding
(padding_idx 0) and position buffer, eight frozen Linear(64, 64)+GELU
layers and a frozen LayerNorm, a trainable head (frozen 33,408 elements,
trainable 2,373, buffer 512).

    frozen_zero3.py --ds-opt ds-opt --ds-run ds-run --mpirun CMD --work DIR
        [--precision P] [--threshold N]

ZeRO-3 on 2 ranks (per-rank batch 2) against one rank (batch 4), 6 Adam
steps. Checks, with their tolerances:
- losses within 1e-5 relative (as --log-json prints them, 6 significant
  digits), weights 1e-5 relative L2 (bf16/fp16: 5e-3 and 1e-2): only the
  reduction order differs;
- the frozen backbone and the buffer are bit-unchanged in the 2-rank run's
  --save-weights file, whole (full shapes);
- the report: per-rank frozen and buffer bytes are half of one rank's
  (every frozen tensor has an even element count; with --threshold N the
  tensors below N elements stay whole, as trainable ones do);
- the memory plan is exact: ds-run's arena high-water mark equals the
  planned bytes every step on every rank;
- the per-rank peak drops: ZeRO-2 on the same 2 ranks keeps every weight
  whole, ZeRO-3 partitions them; the drop must exceed the trainable
  weights' whole bytes, the most partitioning them alone could save, so
  the frozen ones are what it saves (both peaks printed);
- --offload-param=cpu (fp32): the host holds the trainable, frozen and
  buffer shards (the report's host storage is their sum; tensors under the
  threshold stay whole on the device) and the weights equal the device
  run's bit for bit;
- checkpoints: 3 steps, a checkpoint, 3 more give the straight run's
  weights bit for bit; the 2-rank ZeRO-3 checkpoint resumed on one rank
  (ZeRO-0) and a 1-rank checkpoint resumed on 2 ranks at ZeRO-3 give the
  other run's weights within 1e-5 relative L2 (1e-2 in 16 bits), frozen
  tensors bit-unchanged.
"""
import argparse
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "Zoo"), os.path.join(HERE, "..", "..", "python")]
import ds  # noqa: E402
import models  # noqa: E402

warnings.filterwarnings("ignore")
STEPS, LR = 6, 1e-2


def frozen_backbone(layers=8, dim=64):
    """test/Zoo's fine-tuning model (padding_idx embedding, position
    buffer, trainable head) with a deeper, wider frozen backbone."""
    torch.manual_seed(0)
    model = models.FineTune(vocab=32, dim=dim, seq=8, classes=5)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(dim, dim), nn.GELU()]
    model.backbone = nn.Sequential(*blocks, nn.LayerNorm(dim))
    for p in model.backbone.parameters():
        p.requires_grad_(False)
    return model


class Tools:
    def __init__(self, args):
        self.args = args
        self.w = lambda f: os.path.join(args.work, f)

    def compile(self, onnx_path, plan, *extra):
        flags = ["--optimizer=adam", f"--lr={LR}", "--reduce-bucket-size=1000",
                 "--prefetch-bucket-size=1000"]
        if self.args.precision != "fp32":
            flags.append(f"--precision={self.args.precision}")
        r = subprocess.run([self.args.ds_opt, onnx_path, *flags, *extra, "-o", plan,
                            "--report=json"], capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr)
        return json.loads(r.stdout)

    def train(self, plan, tag, ranks=1, steps=STEPS, *extra):
        prefix = self.args.mpirun.split() + ["-np", str(ranks)] if ranks > 1 else []
        subprocess.run([*prefix, self.args.ds_run, plan, "--steps", str(steps),
                        "--data", self.w("data.npz"), "--threads", "1",
                        "--log-json", self.w(tag + ".json"),
                        "--save-weights", self.w(tag + ".npz"), *extra],
                       check=True, capture_output=True, text=True, timeout=300)
        rows = [json.loads(line) for line in open(self.w(tag + ".json"))]
        return rows, np.load(self.w(tag + ".npz"))


def rel_l2(a, b):
    diff = sum(float(np.sum((a[k].astype(np.float64) - b[k]) ** 2)) for k in a.files)
    norm = sum(float(np.sum(a[k].astype(np.float64) ** 2)) for k in a.files)
    return (diff / norm) ** 0.5


def main():
    ap = argparse.ArgumentParser()
    for a in ("--ds-opt", "--ds-run", "--work", "--mpirun"):
        ap.add_argument(a, required=True)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--threshold", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    t = Tools(args)
    problems = []

    model = frozen_backbone()
    tokens = torch.randint(0, 32, (4, 8))
    tokens[:, -2:] = 0
    inputs = {"tokens": tokens, "labels": torch.randint(0, 5, (4,))}
    before = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    frozen = [k for k, _ in model.named_parameters() if k.startswith("backbone.")]
    trainable_bytes = 4 * sum(p.numel() for p in model.parameters() if p.requires_grad)
    ds.export(model, inputs, t.w("one.onnx"))
    ds.export(model, {k: v[:2] for k, v in inputs.items()}, t.w("two.onnx"))
    # The global batch: ds-run gives each of N ranks its 4/N rows.
    np.savez(t.w("data.npz"), **{k: v.numpy() for k, v in inputs.items()})

    grid = ["--world-size=2", f"--param-persistence-threshold={args.threshold}"]
    one = t.compile(t.w("one.onnx"), t.w("one.plan"))
    z3 = t.compile(t.w("two.onnx"), t.w("z3.plan"), *grid, "--zero=3")
    z2 = t.compile(t.w("two.onnx"), t.w("z2.plan"), *grid, "--zero=2")

    # The report: per-rank frozen and buffer bytes.
    def per_rank(names):
        return sum(4 * (before[k].size if before[k].size < args.threshold
                        else -(-before[k].size // 2)) for k in names)
    ts1, ts3 = one["trainable_set"], z3["trainable_set"]
    want = (per_rank(frozen), per_rank(["pos"]))
    got = (ts3["frozen_bytes"], ts3["buffer_bytes"])
    if got != want or ts3["frozen"] != ts1["frozen"] or ts3["frozen"] != len(frozen):
        problems.append(f"report: frozen/buffer bytes per rank {got}, want {want}")

    # Training: 2 ranks against one; the frozen tensors unchanged and whole.
    rows1, w1 = t.train(t.w("one.plan"), "one")
    rows3, w3 = t.train(t.w("z3.plan"), "z3", 2)
    rows2, _ = t.train(t.w("z2.plan"), "z2", 2)
    l1, l3 = [r["loss"] for r in rows1], [r["loss"] for r in rows3]
    loss_err = max(abs(p - q) / abs(p) for p, q in zip(l1, l3))
    rel = rel_l2(w1, w3)
    tol, wtol = (1e-5, 1e-5) if args.precision == "fp32" else (5e-3, 1e-2)
    if len(l1) != STEPS or len(l3) != STEPS or loss_err > tol or rel > wtol:
        problems.append(f"2 ranks differ from one: loss {loss_err:.1e}, weights {rel:.1e}")
    changed = [k for k in frozen + ["pos"]
               if w3[k].shape != before[k].shape or not np.array_equal(w3[k], before[k])]
    if changed:
        problems.append(f"frozen tensors changed or not whole: {changed}")

    # The memory plan: measured = planned, and the peak drops.
    mem = {(r.get("peak_bytes"), r.get("planned_bytes")) for r in rows3}
    exact = all(p is not None and p == q for p, q in mem)
    if not exact:
        problems.append(f"arena high-water marks and planned bytes {sorted(mem)}")
    peak2, peak3 = z2["per_rank_peak"], z3["per_rank_peak"]
    if peak2 - peak3 <= trainable_bytes:
        problems.append(f"peak per rank: ZeRO-2 {peak2}, ZeRO-3 {peak3}: the drop is not "
                        f"above the trainable weights' {trainable_bytes} bytes")

    # --offload-param: the frozen and buffer shards live on the host with
    # the trainable ones; the same arithmetic, bit for bit.
    host = None
    if args.precision == "fp32":
        off = t.compile(t.w("two.onnx"), t.w("off.plan"), *grid, "--zero=3",
                        "--offload-param=cpu")
        _, wo = t.train(t.w("off.plan"), "off", 2)
        host = off["offload"]["host_storage"]
        # Every partitioned tensor's shard (those under the threshold stay
        # whole on the device, trainable or not).
        want_host = sum(4 * -(-v.size // 2) for v in before.values()
                        if v.size >= args.threshold)
        if host != want_host or any(not np.array_equal(wo[k], w3[k]) for k in w3.files):
            problems.append(f"--offload-param: host storage {host} (want {want_host}) "
                            "or weights differ from the device run")

    # Checkpoints: bit for bit on the same plan; across world sizes/stages.
    t.train(t.w("z3.plan"), "z3a", 2, STEPS // 2, "--save", t.w("ck3"))
    _, r3 = t.train(t.w("z3.plan"), "z3b", 2, STEPS, "--resume", t.w("ck3"))
    bad = [k for k in w3.files if not np.array_equal(r3[k], w3[k])]
    if bad:
        problems.append(f"resumed ZeRO-3 differs from the straight run in {bad}")
    _, r31 = t.train(t.w("one.plan"), "z3to1", 1, STEPS, "--resume", t.w("ck3"))
    t.train(t.w("one.plan"), "onea", 1, STEPS // 2, "--save", t.w("ck1"))
    _, r13 = t.train(t.w("z3.plan"), "oneto3", 2, STEPS, "--resume", t.w("ck1"))
    across = max(rel_l2(w1, r31), rel_l2(w3, r13))
    moved = [k for k in frozen + ["pos"] for r in (r31, r13)
             if not np.array_equal(r[k], before[k])]
    if across > wtol or moved:
        problems.append(f"resumed across world sizes: weights {across:.1e}, frozen moved {moved}")

    print(f"frozen backbone {args.precision} ZeRO-3 threshold {args.threshold}, 2 ranks "
          f"against 1: worst loss rel error {loss_err:.1e} (tol {tol:g}), weights relative "
          f"L2 {rel:.1e} (tol {wtol:g}); frozen {ts3['frozen']} tensors "
          f"{ts3['frozen_bytes']} bytes per rank (1 rank {ts1['frozen_bytes']}), buffer "
          f"{ts3['buffer_bytes']} ({ts1['buffer_bytes']}), bit-unchanged; arena = planned "
          f"every step: {exact}; peak per rank ZeRO-2 {peak2}, ZeRO-3 {peak3}"
          + (f"; --offload-param host storage {host}" if args.precision == "fp32" else "")
          + f"; checkpoint "
          f"resumed bit-exact, across world sizes {across:.1e}")
    print("FAIL: " + "; ".join(problems) if problems else "PASS")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
