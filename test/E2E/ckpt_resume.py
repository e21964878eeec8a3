#!/usr/bin/python3
"""Sharded checkpoints: train 6 steps straight, and 3 steps, save, resume,
run to 6. The losses of steps 4-6 and the final weights must be identical
(bit for bit: the resumed run restores every parameter, optimizer state and
the step counter that drives the schedule, data order and dropout)."""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np


def setup(extra=()):
    """The tools and work folder from the command line (`extra`: more
    integer options, (flag, default)), and data3.npz in it: three global
    batches of 8 x 32 tokens used in turn (a resumed run must pick the
    right one). Returns the arguments and a path maker."""
    ap = argparse.ArgumentParser()
    for flag in ("--ds-opt", "--ds-run", "--mpirun", "--work", "--onnx"):
        ap.add_argument(flag, required=True)
    for flag, default in extra:
        ap.add_argument(flag, type=int, default=default)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    w = lambda f: os.path.join(args.work, f)
    rng = np.random.RandomState(1)
    np.savez(w("data3.npz"), idx=rng.randint(0, 128, size=(3 * 8, 32)),
             targets=rng.randint(0, 128, size=(3 * 8, 32)))
    return args, w


def main():
    args, w = setup([("--ranks", 2), ("--zero", 3)])
    b = 8 // args.ranks
    plan = w(f"resume{args.zero}.plan")
    subprocess.run([args.ds_opt, args.onnx, f"--input-shape=idx:{b}x32",
                    f"--input-shape=targets:{b}x32", "--optimizer=adamw", "--lr=3e-3",
                    "--lr-schedule=warmup-cosine", "--warmup-steps=2", "--total-steps=6",
                    f"--world-size={args.ranks}", f"--zero={args.zero}", "-o", plan],
                   check=True)
    ck = w(f"ck{args.zero}")
    shutil.rmtree(ck, ignore_errors=True)
    mpi = args.mpirun.split() + ["-np", str(args.ranks), args.ds_run, plan,
                                 "--data", w("data3.npz"), "--threads", "1"]
    run = lambda *extra: subprocess.run(mpi + list(extra), check=True,
                                        capture_output=True, text=True, timeout=300)
    run("--steps", "6", "--log-json", w("straight.json"), "--save-weights", w("straight.npz"))
    run("--steps", "3", "--save", ck)
    out = run("--steps", "6", "--resume", ck, "--log-json", w("resumed.json"),
              "--save-weights", w("resumed.npz"))
    print(out.stdout.splitlines()[0])
    a = [json.loads(l)["loss"] for l in open(w("straight.json"))][3:]
    r = [json.loads(l) for l in open(w("resumed.json"))]
    steps = [x["step"] for x in r]
    r = [x["loss"] for x in r]
    ws, wr = np.load(w("straight.npz")), np.load(w("resumed.npz"))
    same = sorted(ws.files) == sorted(wr.files) and all(
        np.array_equal(ws[k], wr[k]) for k in ws.files)
    print(f"ZeRO-{args.zero}, {args.ranks} ranks: straight steps 4-6 {a}, resumed steps "
          f"{steps} {r}; final weights bit-identical: {same}")
    ok = steps == [4, 5, 6] and a == r and same
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
