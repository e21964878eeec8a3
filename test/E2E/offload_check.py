#!/usr/bin/python3
"""Offload on the bundled GPT (CPU backend): for each rank count, ZeRO stage,
precision and offload mode, 5 training steps must give losses and final
weights bit-identical to the same plan without offload, and the measured
per-rank device peak must fall by exactly what the plan says it offloads
(the report's device totals), with host and NVMe figures measured = planned.

    offload_check.py --ds-opt DS_OPT --ds-run DS_RUN --mpirun "mpirun ..."
                     --onnx GPT --data NPZ --work DIR
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p.stdout


def train(args, tag, flags, ranks):
    plan = os.path.join(args.work, tag + ".plan")
    rep = run([args.ds_opt, args.onnx, "--optimizer=adam", "--report=json",
               "-o", plan, "--world-size=%d" % ranks] + flags)
    report = json.loads(rep[rep.index("{"):])
    log = os.path.join(args.work, tag + ".jsonl")
    weights = os.path.join(args.work, tag + ".npz")
    out = run(shlex.split(args.mpirun) + ["-np", str(ranks), args.ds_run, plan,
              "--steps", "5", "--data", args.data, "--log-json", log,
              "--save-weights", weights])
    losses = [json.loads(l)["loss"] for l in open(log)]
    m = re.search(r"peak memory per rank (\d+) bytes measured, (\d+) planned",
                  out)
    host = re.search(r"offload: host memory per rank (\d+) bytes measured, "
                     r"(\d+) planned.*NVMe (\d+) bytes; per step device->host "
                     r"(\d+), host->device (\d+), NVMe read (\d+), written "
                     r"(\d+) bytes \(planned (\d+), (\d+), (\d+), (\d+)\)", out)
    return {"losses": losses, "weights": dict(np.load(weights)),
            "device": (int(m.group(1)), int(m.group(2))),
            "host": [int(x) for x in host.groups()] if host else None,
            "report": report}


def parse_args():
    """The tools, the model and data, and the work folder (made)."""
    ap = argparse.ArgumentParser()
    for a in ("--ds-opt", "--ds-run", "--mpirun", "--onnx", "--data", "--work"):
        ap.add_argument(a, required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    return args


def main():
    args = parse_args()
    nvme = os.path.join(args.work, "nvme")
    os.makedirs(nvme, exist_ok=True)
    cases = []
    for ranks in (1, 2):
        for stage in (0, 1, 2, 3):
            for opt in ("cpu", "nvme:" + nvme):
                cases.append((ranks, stage, "fp32", opt, "none"))
            if stage == 3:
                cases.append((ranks, stage, "fp32", "cpu", "cpu"))
                cases.append((ranks, stage, "fp32", "none", "nvme:" + nvme))
    cases.append((2, 2, "bf16", "cpu", "none"))
    cases.append((2, 3, "bf16", "nvme:" + nvme, "cpu"))
    base = {}
    ok = True
    for ranks, stage, prec, opt, par in cases:
        key = (ranks, stage, prec)
        common = ["--zero=%d" % stage, "--precision=" + prec]
        if key not in base:
            base[key] = train(args, "base-%d-%d-%s" % key, common, ranks)
        b = base[key]
        tag = "off-%d-%d-%s-%s-%s" % (ranks, stage, prec, opt.split(":")[0],
                                       par.split(":")[0])
        r = train(args, tag, common + ["--offload-optimizer=" + opt,
                                       "--offload-param=" + par], ranks)
        same_loss = r["losses"] == b["losses"]
        same_w = sorted(r["weights"]) == sorted(b["weights"]) and all(
            np.array_equal(r["weights"][k], b["weights"][k]) for k in b["weights"])
        planned_drop = b["report"]["memory"]["total"] - r["report"]["memory"]["total"]
        measured_drop = b["device"][0] - r["device"][0]
        off = r["report"]["offload"]
        h = r["host"]
        host_ok = h is not None and h[0] == h[1] and h[3:7] == h[7:11] and \
            h[2] == off["nvme_storage"]
        good = (same_loss and same_w and r["device"][0] == r["device"][1] and
                measured_drop == planned_drop and planned_drop > 0 and host_ok)
        ok &= good
        print("ranks %d zero %d %s optimizer=%s param=%s: losses bit-identical "
              "%s, weights bit-identical %s, device peak %d -> %d (fell %d, "
              "planned %d), host %d (planned %d), nvme %d, moved/step d2h %d "
              "h2d %d nvme-r %d nvme-w %d: %s" % (
                  ranks, stage, prec, opt.split(":")[0], par.split(":")[0],
                  same_loss, same_w, b["device"][0], r["device"][0],
                  measured_drop, planned_drop, h[0] if h else -1,
                  h[1] if h else -1, h[2] if h else -1,
                  h[3] if h else -1, h[4] if h else -1, h[5] if h else -1,
                  h[6] if h else -1, "PASS" if good else "FAIL"))
        # DeepSpeed's figure: offloading a mixed-precision optimizer frees
        # 12 bytes per trainable element (f32 master, m, v) over N ranks.
        if prec == "bf16" and par == "none" and stage >= 1:
            psi = r["report"]["psi_padded"]
            want = 12 * psi // ranks
            print("  bf16 optimizer offload frees %d bytes; 12*psi/N = %d: %s"
                  % (planned_drop, want, "PASS" if planned_drop == want else "FAIL"))
            ok &= planned_drop == want
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
