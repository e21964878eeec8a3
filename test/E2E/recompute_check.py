#!/usr/bin/python3
"""Recompute on the bundled GPT (fp32, CPU):

1. --recompute=full, every-layer and budget plans train bit-identically to
   none (losses and final weights, 5 steps).
2. At 5 budgets spread between the full and none peaks, each plan's
   planned per-rank peak fits its budget, ds-run measures exactly the
   planned bytes, and the chosen extra FLOPs are within 2% of the optimum
   that a brute-force solver written here finds on the same cost model
   (the segments, their saved bytes and FLOPs, the always-kept bytes and
   the activation budget, all read from ds-opt --report).

    recompute_check.py --ds-opt DS_OPT --ds-run DS_RUN --onnx GPT --data NPZ
                       --work DIR [--opt-flag=...]
"""
import argparse
import itertools
import json
import os
import re
import subprocess
import sys

import numpy as np


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def report(args, flags, plan):
    return run([args.ds_opt, args.onnx, "--optimizer=adam", "--report",
                "-o", plan] + flags + args.opt_flag)


def peak_of(text):
    m = re.search(r"per-rank peak (\d+) bytes", text)
    return int(m.group(1))


def model_of(text):
    """The cost model the report prints: segments and always-kept bytes."""
    segs = [(int(a), int(b), int(c), s) for a, b, c, s in re.findall(
        r"segment \d+: input (\d+) B, saved (\d+) B, forward (\d+) FLOPs, (.*)",
        text)]
    fixed = int(re.search(r"segments that cannot be recomputed\) (\d+) bytes",
                          text).group(1))
    chosen = re.search(r"chosen\s+(\d+)\s+(\d+)", text)
    budget = re.search(r"activation budget \(model\) (\d+) bytes", text)
    return segs, fixed, (int(chosen.group(1)), int(chosen.group(2))), (
        int(budget.group(1)) if budget else None)


def chain_peak(saved, rc):
    prefix = peak = 0
    for a, r in zip(saved, rc):
        peak = max(peak, prefix + a)
        if not r:
            prefix += a
    return max(peak, prefix)


def brute_force(segs, fixed, budget):
    """Least extra FLOPs over every subset of recomputable segments."""
    saved = [s[1] for s in segs]
    free = [j for j, s in enumerate(segs) if not s[3].startswith("kept (not")]
    best = None
    for bits in itertools.product([False, True], repeat=len(free)):
        rc = [False] * len(segs)
        for j, b in zip(free, bits):
            rc[j] = b
        act = fixed + chain_peak(saved, rc)
        if act > budget:
            continue
        flops = sum(segs[j][2] for j in range(len(segs)) if rc[j])
        if best is None or flops < best:
            best = flops
    return best


def measured_and_planned(out):
    """ds-run's measured and planned per-rank bytes (arena, parameters,
    buffers, optimizer state) from its output."""
    m = re.search(r"arena high-water (\d+) \((\d+)\)", out)
    stored = re.search(r"parameters (\d+) \((\d+)\), buffers (\d+) \((\d+)\), "
                       r"optimizer state (\d+) \((\d+)\)", out)
    measured = int(m.group(1)) + sum(int(stored.group(i)) for i in (1, 3, 5))
    planned = int(m.group(2)) + sum(int(stored.group(i)) for i in (2, 4, 6))
    return measured, planned


def train(args, plan, tag):
    log = os.path.join(args.work, tag + ".json")
    weights = os.path.join(args.work, tag + ".npz")
    out = run([args.ds_run, plan, "--steps", "5", "--data", args.data,
               "--log-json", log, "--save-weights", weights])
    measured, planned = measured_and_planned(out)
    losses = [json.loads(l)["loss"] for l in open(log)]
    return losses, np.load(weights), measured, planned


def same(a, b):
    return a[0] == b[0] and sorted(a[1].files) == sorted(b[1].files) and all(
        np.array_equal(a[1][k], b[1][k]) for k in a[1].files)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--opt-flag", action="append", default=[])
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    ok = True

    plans = {}
    for mode in ["none", "full", "every-layer"]:
        plan = os.path.join(args.work, "rc-%s.plan" % mode)
        plans[mode] = (plan, report(args, ["--recompute=" + mode], plan))
    peak_none, peak_full = peak_of(plans["none"][1]), peak_of(plans["full"][1])
    base = train(args, plans["none"][0], "none")
    print("none: peak %d, losses %s" % (peak_none,
                                        " ".join("%.6f" % x for x in base[0])))
    for mode in ["full", "every-layer"]:
        got = train(args, plans[mode][0], mode)
        print("%s: peak %d, extra FLOPs %d, bit-identical to none: %s, "
              "measured = planned: %s" % (
                  mode, peak_of(plans[mode][1]), model_of(plans[mode][1])[2][1],
                  same(base, got), got[2] == got[3]))
        ok &= same(base, got) and got[2] == got[3]
    ok &= peak_full < peak_none

    for k in range(5):
        budget = peak_full + (peak_none - peak_full) * (k + 0.5) // 5
        plan = os.path.join(args.work, "rc-b%d.plan" % k)
        text = report(args, ["--recompute=budget=%d" % budget], plan)
        peak = peak_of(text)
        segs, fixed, (act, flops), model_budget = model_of(text)
        got = train(args, plan, "b%d" % k)
        line = "budget %d: planned peak %d (fits: %s), measured %d" % (
            budget, peak, peak <= budget, got[2])
        fits = peak <= budget and got[2] == got[3] == peak
        if model_budget is None:  # the search settled on none or full
            optimum = flops
            line += ", plan %s" % ("full" if flops else "none")
        else:
            optimum = brute_force(segs, fixed, model_budget)
            line += ", activation budget %d, extra FLOPs %d, optimum %d" % (
                model_budget, flops, optimum)
        near = optimum is not None and flops <= optimum * 1.02
        line += ", bit-identical: %s" % same(base, got)
        print(line, "PASS" if fits and near and same(base, got) else "FAIL")
        ok &= fits and near and same(base, got)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
