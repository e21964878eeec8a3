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
        [--zero Z --world-size N --mpirun 'mpirun -n N']

With --zero 1 or 2 (ZeRO's shard copies moved before the fused update)
each run also prints the optimizer phase's time per step (ds-run's flops
profile of the last step, "step latency": the updates, the shard copies
and the concatenations around the all-gather, one rank's) and the update
kernels' time (the mean over the ranks) includes the shard copies.
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
    flops = plan + ".flops.txt"
    prefix = args.mpirun.split() if args.mpirun else []
    out = subprocess.run(prefix + [
        os.path.join(args.build, "bin", "ds-run"), plan, "--steps", str(args.steps),
        "--data", data, "--threads", str(threads), "--profile", "--log-json", log,
        "--flops-profile-step", str(args.steps), "--flops-output-file", flops],
        check=True, capture_output=True, text=True).stdout
    # Each rank prints its profile (their lines may interleave): the mean
    # over the ranks.
    ranks = max(1, out.count("profile of the last run:"))
    update, calls = 0.0, 0
    kernels = "adam|multi_adam|shard" if args.zero in (1, 2) else "adam|multi_adam"
    for m in re.finditer(rf"^\s+({kernels})\s+([\d.]+) ms\s+(\d+) calls", out, re.M):
        update += float(m.group(2)) / ranks
        calls += int(m.group(3)) if m.group(1) != "shard" else 0
    calls //= ranks
    steps = [json.loads(l)["time_ms"] for l in open(log)][1:]
    phase = float(re.search(r"^step latency:\s+([\d.]+) ms", open(flops).read(),
                            re.M).group(1))
    return update, calls, steps, phase


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="gpt-small,gpt-train")
    ap.add_argument("--work", default="")
    ap.add_argument("--zero", type=int, default=0)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--mpirun", default="")
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
                            f"--world-size={args.world_size}", f"--zero={args.zero}",
                            "-o", plans[fuse]], check=True)
        for threads in [int(t) for t in args.threads.split(",")]:
            res = {f: ([], [], 0, []) for f in plans}
            for _ in range(args.rounds):
                for fuse in plans:
                    update, calls, steps, phase = run(args, plans[fuse], data, threads)
                    res[fuse][0].append(update)
                    res[fuse][1].extend(steps)
                    res[fuse][3].append(phase)
                    res[fuse] = (res[fuse][0], res[fuse][1], calls, res[fuse][3])
            for fuse, (updates, steps, calls, phases) in res.items():
                print(f"{model} zero {args.zero} x{args.world_size} threads {threads} "
                      f"fuse-optimizer={fuse}: {calls} update calls, update "
                      f"{min(updates):.3f} / {statistics.median(updates):.3f} ms, optimizer "
                      f"phase {min(phases):.3f} / {statistics.median(phases):.3f} ms, step "
                      f"{min(steps):.2f} / {statistics.median(steps):.2f} ms (fastest / median)")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
