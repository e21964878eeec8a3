#!/usr/bin/python3
"""Checkpoints outlive the plan: for each pair of plans (A, B) of the same
model and optimizer, train 6 steps under A, and 3 steps under A, save,
resume under B to step 6. B's steps 4-6 must have A's losses within 1e-5
relative (float sums in another order: another world size, tensor-parallel
split or recompute; measured differences are far below the bound).

    ckpt_layouts.py --ds-opt DS_OPT --ds-run DS_RUN --mpirun MPIRUN --onnx GPT_DYN.onnx --work DIR

Each layout is (ranks, ds-opt flags); the global batch is 8 rows of 32
tokens, each rank takes 8 / data-parallel ranks of them.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_resume import setup  # noqa: E402  (the same tools, folder and data)

LAYOUTS = {
    "1 rank": (1, []),
    "1 rank, recompute full": (1, ["--recompute=full"]),
    "2 ranks ZeRO-1": (2, ["--zero=1"]),
    "2 ranks ZeRO-3": (2, ["--zero=3"]),
    "2 ranks ZeRO-2": (2, ["--zero=2"]),
    "2 ranks ZeRO-2, 1000-element buckets": (2, ["--zero=2", "--reduce-bucket-size=1000",
                                                 "--allgather-bucket-size=1000"]),
    "2 ranks tensor-parallel": (2, ["--tensor-parallel=2"]),
}
# (saved under, resumed under)
PAIRS = [
    ("1 rank", "1 rank, recompute full"),
    ("1 rank, recompute full", "1 rank"),
    ("2 ranks ZeRO-2", "2 ranks ZeRO-2, 1000-element buckets"),
    ("1 rank", "2 ranks ZeRO-1"),
    ("2 ranks ZeRO-1", "2 ranks ZeRO-3"),
    ("2 ranks tensor-parallel", "1 rank"),
]
TOL = 1e-5


def main():
    args, w = setup()
    plans = {}
    for i, (name, (ranks, flags)) in enumerate(LAYOUTS.items()):
        tp = 2 if "--tensor-parallel=2" in flags else 1
        b = 8 // (ranks // tp)
        plans[name] = (ranks, w(f"p{i}.plan"))
        subprocess.run([args.ds_opt, args.onnx, f"--input-shape=idx:{b}x32",
                        f"--input-shape=targets:{b}x32", "--optimizer=adamw", "--lr=3e-3",
                        "--lr-schedule=warmup-cosine", "--warmup-steps=2", "--total-steps=6",
                        f"--world-size={ranks}", *flags, "-o", plans[name][1]],
                       check=True, capture_output=True)

    def run(name, *extra):
        ranks, plan = plans[name]
        cmd = [args.ds_run, plan, "--data", w("data3.npz"), "--threads", "1", *extra]
        if ranks > 1:
            cmd = args.mpirun.split() + ["-np", str(ranks)] + cmd
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)

    losses = lambda p: [(json.loads(l)["step"], json.loads(l)["loss"]) for l in open(p)]
    ok_all = True
    for k, (a, b) in enumerate(PAIRS):
        ck = w(f"ck{k}")
        shutil.rmtree(ck, ignore_errors=True)
        run(a, "--steps", "6", "--log-json", w(f"straight{k}.json"))
        run(a, "--steps", "3", "--save", ck)
        out = run(b, "--steps", "6", "--resume", ck, "--log-json", w(f"resumed{k}.json"))
        straight = losses(w(f"straight{k}.json"))[3:]
        resumed = losses(w(f"resumed{k}.json"))
        worst = max(abs(x[1] - y[1]) / abs(x[1]) for x, y in zip(straight, resumed))
        ok = [s for s, _ in resumed] == [4, 5, 6] and worst <= TOL and \
            "re-partitioned" in out.stdout
        ok_all &= ok
        print(f"saved under '{a}', resumed under '{b}': steps {[s for s, _ in resumed]}, "
              f"worst relative difference {worst:.2e} (bound {TOL:g}): "
              f"{'PASS' if ok else 'FAIL'}")
    print("PASS" if ok_all else "FAIL")
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
