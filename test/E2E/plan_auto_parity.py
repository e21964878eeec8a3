#!/usr/bin/python3
"""--plan=auto on a 2-device cluster whose device memory is 40% below the
naive ZeRO-0 2-rank peak: the plan it writes fits (its planned peak is at
most the device memory), and mpirun -np 2 ds-run of it trains with the
losses of one rank running the whole global batch.

The GPT example, exported with a dynamic batch and sequence; global batch 8
of 32 tokens; the naive layout is 2 ranks x batch 4, ZeRO-0, no recompute.

Tolerance: losses 1e-5 relative each step (5 steps), as dp_parity.py: the
layouts differ only in the order of float sums (a mean of rank means, and
with accumulation a mean of micro-batch means).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fraction", type=float, default=0.6,
                    help="device memory as a fraction of the naive peak")
    ap.add_argument("--host", action="store_true",
                    help="give the cluster a host (offload may be chosen)")
    ap.add_argument("--zero", default=None, help="fix the ZeRO stage")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    w = lambda f: os.path.join(args.work, f)
    onnx_path = w("gpt_dyn.onnx")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples", "gpt", "export_gpt.py"),
                    "--dynamic", "-o", onnx_path], check=True, capture_output=True)
    rng = np.random.RandomState(0)
    np.savez(w("data.npz"), idx=rng.randint(0, 128, size=(8, 32)),
             targets=rng.randint(0, 128, size=(8, 32)))
    opt = ["--optimizer=adam", "--lr=3e-3"]
    shapes = lambda b: [f"--input-shape=idx:{b}x32", f"--input-shape=targets:{b}x32"]
    naive = json.loads(subprocess.run(
        [args.ds_opt, onnx_path, *shapes(4), *opt, "--world-size=2", "--zero=0",
         "--report=json", "-o", w("naive.plan")],
        check=True, capture_output=True, text=True).stdout)["per_rank_peak"]
    memory = int(naive * args.fraction)
    cluster = {"name": "two-small", "nodes": 1, "devices_per_node": 2,
               "device": {"memory": memory, "flops": {"fp32": 1e9},
                          "memory_bandwidth": 1e10},
               "intra_node": {"bandwidth": 1e9, "latency": 1e-5}}
    if args.host:
        cluster["host"] = {"memory": 1e12, "bandwidth": 1e10,
                           "optimizer_bandwidth": 1e10}
    fixed = ["--zero=" + args.zero] if args.zero else []
    json.dump(cluster, open(w("cluster.json"), "w"))
    out = subprocess.run(
        [args.ds_opt, onnx_path, *shapes(8), *opt, "--plan=auto", "--cluster=" + w("cluster.json"),
         "--global-batch=8", "--world-size=2", *fixed, "--report=json", "-o", w("auto.plan")],
        capture_output=True, text=True)
    if out.returncode:
        print("FAIL: ds-opt --plan=auto:", out.stderr)
        sys.exit(1)
    report = json.loads(out.stdout)
    plan = report["plan"]
    chosen = [c for c in plan["candidates"] if c["chosen"]]
    peak = report["memory"]["total"] if "memory" in report else chosen[0]["peak"]
    fits = peak <= memory and report["per_rank_peak"] <= memory
    print(f"naive ZeRO-0 2-rank peak {naive} bytes; device memory {memory} ({args.fraction:.0%}); chosen "
          f"{plan['chosen']}: peak {peak}: {'fits' if fits else 'DOES NOT FIT'}")
    print("predicted step_time_s positive:", report["predicted"]["step_time_s"] > 0)
    run = lambda prefix, p, tag: subprocess.run(
        prefix + [args.ds_run, p, "--steps", "5", "--data", w("data.npz"),
                  "--log-json", w(tag + ".json"), "--threads", "1"],
        check=True, capture_output=True, text=True, timeout=300)
    subprocess.run([args.ds_opt, onnx_path, *shapes(8), *opt, "-o", w("one.plan")],
                   check=True, capture_output=True)
    run([], w("one.plan"), "one")
    run(args.mpirun.split() + ["-np", "2"], w("auto.plan"), "auto")
    a = [json.loads(l)["loss"] for l in open(w("one.json"))]
    b = [json.loads(l)["loss"] for l in open(w("auto.json"))]
    err = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    print(f"losses 1 rank {' '.join('%.5f' % x for x in a)}; plan {' '.join('%.5f' % x for x in b)}; "
          f"worst relative error {err:.1e} (tol 1e-5)")
    ok = fits and len(a) == len(b) == 5 and err <= 1e-5
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
