#!/usr/bin/python3
"""Multi-tensor optimizer steps (--fuse-optimizer, issue 24 item 3) against
one kernel per parameter:

1. The same model, data and steps with --fuse-optimizer=true and =false:
   the logged losses and the saved weights are bit-identical (the
   multi-tensor kernels apply the single kernels' per-element arithmetic).
2. The fused plan runs multi_adam (multi_sgd) and no single adam (sgd)
   kernel, the unfused plan the reverse; the counts of update kernels per
   step are printed (ds-run --profile).
3. The planned per-rank peak is the same for both plans, and each run's
   arena high-water mark equals its plan's arena (the exact memory plan
   stays exact: ZeRO 1-2's fused plans move the shard copies of the
   parameters before the one update).

    fuse_optimizer_parity.py --ds-opt DS_OPT --ds-run DS_RUN --onnx MODEL
        --data NPZ --work DIR [--steps 4] [--threads 2] [--opt-flag=...]
        [--mpirun 'mpirun ... -n 2']
"""
import argparse
import json
import os
import re
import shlex
import subprocess

import numpy as np


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def compile_plan(args, fuse):
    plan = os.path.join(args.work, f"fuse-{fuse}.plan")
    text = run([args.ds_opt, args.onnx, "--report", f"--fuse-optimizer={fuse}",
                "-o", plan] + args.opt_flag)
    return plan, int(re.search(r"per-rank peak (\d+) bytes", text).group(1))


def train(args, plan, fuse):
    log = os.path.join(args.work, f"fuse-{fuse}.json")
    weights = os.path.join(args.work, f"fuse-{fuse}.npz")
    prefix = shlex.split(args.mpirun) if args.mpirun else []
    out = run(prefix + [args.ds_run, plan, "--steps", str(args.steps), "--data",
                        args.data, "--threads", str(args.threads), "--log-json",
                        log, "--save-weights", weights, "--profile"])
    calls = {}
    for m in re.finditer(r"^\s+(adam|sgd|multi_adam|multi_sgd)\s+[\d.]+ ms\s+(\d+) calls",
                         out, re.M):
        calls[m.group(1)] = int(m.group(2))
    losses = [json.loads(l)["loss"] for l in open(log)]
    # Every rank's arena high-water mark against its plan's arena.
    marks = re.findall(r"arena high-water (\d+) \((\d+)\)", out)
    exact = bool(marks) and all(a == b for a, b in marks)
    return losses, dict(np.load(weights)), calls, exact


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mpirun", default="")
    ap.add_argument("--opt-flag", action="append", default=[])
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    results = {}
    for fuse in ("false", "true"):
        plan, peak = compile_plan(args, fuse)
        losses, weights, calls, exact = train(args, plan, fuse)
        results[fuse] = (peak, losses, weights, exact)
        print(f"fuse-optimizer={fuse}: planned peak {peak}, update kernel calls "
              + ", ".join(f"{k} {v}" for k, v in sorted(calls.items())))
    (p0, l0, w0, e0), (p1, l1, w1, e1) = results["false"], results["true"]
    print(f"losses over {args.steps} steps bit-identical: {l0 == l1 and len(l0) == args.steps}")
    same = sorted(w0) == sorted(w1) and all(
        w0[k].dtype == w1[k].dtype and w0[k].tobytes() == w1[k].tobytes() for k in w0)
    print(f"{len(w0)} weights bit-identical: {same}")
    print(f"same planned peak: {p0 == p1}")
    print(f"arena high-water = planned arena: {e0 and e1}")
    ok = l0 == l1 and same and p0 == p1 and e0 and e1
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main()
