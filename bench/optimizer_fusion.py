#!/usr/bin/python3
"""Multi-tensor optimizer steps (--fuse-optimizer, issue 24 item 3): the
update's time per step and the whole step, with and without fusion, on
bench/step_vs_torch.py's GPTs (gpt-small: d=128, 4 layers, batch 4 x 64;
gpt-train: d=256, 4 layers, batch 4 x 128), Adam, at 1 and 2 threads.

Rounds interleave the two plans; each run is --steps S with --profile
(the profile is the run's last step) and --log-json (the step times; the
first step is a warm-up and left out). Printed per model and thread
count: the update kernels' calls and ms per step (fastest and median over
the rounds) and the step's ms (fastest and median of all timed steps).

    bench/optimizer_fusion.py [--rounds 5] [--steps 6] [--threads 1,2]
        [--models gpt-small,gpt-train] [--build build] [--work DIR]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "examples", "gpt"), os.path.join(ROOT, "python")]


def export(size, work):
    import numpy as np
    import export_gpt
    path = os.path.join(work, f"gpt-{size}.onnx")
    data = os.path.join(work, f"gpt-{size}.npz")
    if not os.path.exists(path):
        model, idx, targets = export_gpt.build(size)
        export_gpt.export(model, idx, targets, path)
        np.savez(data, idx=idx.numpy(), targets=targets.numpy())
    return path, data


def run(args, plan, data, threads):
    log = plan + ".json"
    out = subprocess.run([os.path.join(args.build, "bin", "ds-run"), plan, "--steps",
                          str(args.steps), "--data", data, "--threads", str(threads),
                          "--profile", "--log-json", log],
                         check=True, capture_output=True, text=True).stdout
    update, calls = 0.0, 0
    for m in re.finditer(r"^\s+(adam|multi_adam)\s+([\d.]+) ms\s+(\d+) calls", out, re.M):
        update += float(m.group(2))
        calls += int(m.group(3))
    steps = [json.loads(l)["time_ms"] for l in open(log)][1:]
    return update, calls, steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="gpt-small,gpt-train")
    ap.add_argument("--work", default="")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="optfusion-")
    os.makedirs(work, exist_ok=True)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    for model in args.models.split(","):
        onnx, data = export(model.split("-", 1)[1], work)
        plans = {}
        for fuse in ("false", "true"):
            plans[fuse] = os.path.join(work, f"{model}-fuse-{fuse}.plan")
            subprocess.run([os.path.join(args.build, "bin", "ds-opt"), onnx,
                            "--optimizer=adam", "--lr=1e-3", f"--fuse-optimizer={fuse}",
                            "-o", plans[fuse]], check=True)
        for threads in [int(t) for t in args.threads.split(",")]:
            res = {f: ([], [], 0) for f in plans}
            for _ in range(args.rounds):
                for fuse in plans:
                    update, calls, steps = run(args, plans[fuse], data, threads)
                    res[fuse][0].append(update)
                    res[fuse][1].extend(steps)
                    res[fuse] = (res[fuse][0], res[fuse][1], calls)
            for fuse, (updates, steps, calls) in res.items():
                print(f"{model} threads {threads} fuse-optimizer={fuse}: {calls} update "
                      f"calls, update {min(updates):.3f} / {statistics.median(updates):.3f} ms, "
                      f"step {min(steps):.2f} / {statistics.median(steps):.2f} ms "
                      f"(fastest / median)")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
