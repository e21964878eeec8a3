#!/usr/bin/python3
"""Pipeline parallelism against one rank, on a model and its data:

the plan compiled with --pipeline-parallel=P --micro-batches=M (with
--tensor-parallel=T and D data-parallel ranks: world P*T*D) trains with the
losses of ONE rank running the plan compiled with --grad-accum=D*M: an
update of the pipeline averages M micro-batches on each of D ranks, and
ds-run hands rank r of micro-batch j the rows that the one-rank run reads
as its micro-batch D*j + r, so the D*M micro-batches are the same. Losses
within LOSS_TOL relative each step; --save-weights (every stage's weights,
joined) equals the one-rank weights (relative L2 within ADAM_WEIGHT_TOL, as
in tp_parity.py: Adam amplifies the reordering of sums).

    pp_parity.py --ds-opt DS_OPT --ds-run DS_RUN --mpirun "mpirun ..."
                 --onnx MODEL --data NPZ --work DIR --pp P --micro M
                 [--tp T] [--dp D] [--schedule S] [--opt-flag=...]
"""
import argparse
import os
import re
import shlex
import sys

import numpy as np

# The same helpers and bounds as tensor parallelism's check.
from tp_parity import ADAM_WEIGHT_TOL, LOSS_TOL, losses, relative_l2, run


def main():
    ap = argparse.ArgumentParser()
    for a in ("--ds-opt", "--ds-run", "--mpirun", "--onnx", "--data", "--work"):
        ap.add_argument(a, required=True)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--schedule", default="1f1b")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--opt-flag", action="append", default=[])
    # Flags for the pipeline plan only (--sequence-parallel).
    ap.add_argument("--pp-flag", action="append", default=[])
    ap.add_argument("--checkpoint", action="store_true",
                    help="also: save at step 2, resume to the end (the same "
                    "losses), and consolidate the final checkpoint (equal to "
                    "--save-weights)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    w = lambda name: os.path.join(args.work, name)
    mpirun = shlex.split(args.mpirun)
    world = args.pp * args.tp * args.dp
    run([args.ds_opt, args.onnx, "-o", w("ref.plan"),
         "--grad-accum=%d" % (args.dp * args.micro)] + args.opt_flag)
    report = run([args.ds_opt, args.onnx, "-o", w("pp.plan"), "--report",
                  "--world-size=%d" % world, "--tensor-parallel=%d" % args.tp,
                  "--pipeline-parallel=%d" % args.pp,
                  "--micro-batches=%d" % args.micro,
                  "--schedule=%s" % args.schedule] + args.opt_flag + args.pp_flag)
    print(report.splitlines()[0])
    common = ["--steps", str(args.steps), "--data", args.data]
    ref = [args.ds_run, w("ref.plan"), "--log-json", w("ref.json"),
           "--save-weights", w("ref.npz")] + common
    run(ref)
    out = run(mpirun + ["-np", str(world), args.ds_run, w("pp.plan"),
                        "--log-json", w("pp.json"), "--save-weights",
                        w("pp.npz")]
              + (["--save", w("ck")] if args.checkpoint else []) + common)
    ok = True
    a, b = losses(w("ref.json")), losses(w("pp.json"))
    worst = max(abs(x[1] - y[1]) / abs(x[1]) for x, y in zip(a, b))
    good = len(a) == len(b) == args.steps and worst <= LOSS_TOL
    ok &= good
    print("losses: %d steps, first %.6f last %.6f, worst relative difference "
          "%.2e (bound %g): %s" % (len(b), b[0][1], b[-1][1], worst, LOSS_TOL,
                                   "PASS" if good else "FAIL"))
    w1, wp = np.load(w("ref.npz")), np.load(w("pp.npz"))
    same_names = sorted(w1.files) == sorted(wp.files) and all(
        w1[k].shape == wp[k].shape for k in w1.files)
    err = relative_l2(w1, wp) if same_names else float("inf")
    good = same_names and err <= ADAM_WEIGHT_TOL
    ok &= good
    print("weights: %d tensors, same names and shapes %s, relative L2 "
          "difference %.2e (bound %g): %s"
          % (len(w1.files), same_names, err, ADAM_WEIGHT_TOL,
             "PASS" if good else "FAIL"))
    # Each stage's first rank reports its activation stash, measured and
    # planned (bytes kept per micro-batch x the copies its schedule needs).
    stash = sorted(l for l in out.splitlines() if "activation stash" in l)
    good = len(stash) == args.pp
    for line in stash:
        m = re.search(r"(stage \d+): activation stash (\d+) bytes at most, "
                      r"planned (\d+)", line)
        good &= bool(m) and m.group(2) == m.group(3)
        if m:
            print("%s: stash %s bytes measured, %s planned"
                  % (m.group(1), m.group(2), m.group(3)))
    ok &= good
    print("stash: every stage's measured equals planned: %s"
          % ("PASS" if good else "FAIL"))
    if args.checkpoint:
        # Consolidated (every stage's checkpoint merged) equals the
        # weights the run wrote.
        run([args.ds_run, "--consolidate", w("ck"), "-o", w("ck.npz")])
        wc = np.load(w("ck.npz"))
        good = sorted(wc.files) == sorted(wp.files) and all(
            np.array_equal(wc[k], wp[k]) for k in wp.files)
        ok &= good
        print("consolidated checkpoint equals --save-weights: %s"
              % ("PASS" if good else "FAIL"))
        # Stopped after step 2 and resumed: steps 3.. repeat exactly.
        two = ["--data", args.data]
        run(mpirun + ["-np", str(world), args.ds_run, w("pp.plan"), "--steps",
                      "2", "--save", w("ck2")] + two)
        run(mpirun + ["-np", str(world), args.ds_run, w("pp.plan"), "--steps",
                      str(args.steps), "--resume", w("ck2"), "--log-json",
                      w("resumed.json")] + two)
        r = losses(w("resumed.json"))
        good = r == b[2:]
        ok &= good
        print("resumed from step 2: steps %s, the same losses: %s"
              % ([x for x, _ in r], "PASS" if good else "FAIL"))
        # Another layout: the pipeline's step-2 checkpoint resumed by the
        # one-rank plan (stages merged), and the one-rank plan's step-2
        # checkpoint resumed by the pipeline (split into stages): steps 3..
        # give the pipeline's losses within LOSS_TOL.
        run([args.ds_run, w("ref.plan"), "--steps", str(args.steps), "--resume",
             w("ck2"), "--log-json", w("merged.json")] + two)
        run([args.ds_run, w("ref.plan"), "--steps", "2", "--save",
             w("refck2")] + two)
        run(mpirun + ["-np", str(world), args.ds_run, w("pp.plan"), "--steps",
                      str(args.steps), "--resume", w("refck2"), "--log-json",
                      w("split.json")] + two)
        for name, what in (("merged.json", "pipeline checkpoint on 1 rank"),
                           ("split.json", "1-rank checkpoint on the pipeline")):
            r = losses(w(name))
            worst = max(abs(x[1] - y[1]) / abs(y[1]) for x, y in zip(r, b[2:]))
            good = [x for x, _ in r] == [x for x, _ in b[2:]] and worst <= LOSS_TOL
            ok &= good
            print("resumed in another layout (%s): steps %s, worst relative "
                  "difference %.2e: %s" % (what, [x for x, _ in r], worst,
                                           "PASS" if good else "FAIL"))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
