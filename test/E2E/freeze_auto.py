#!/usr/bin/python3
"""1-bit Adam with `freeze_step: "auto"` (docs/compression.md) on N MPI
ranks: ds-run ends the warm-up after the first step at which ||v|| has
settled (include/ds/Support/FreezeAuto.h) and prints one line saying so.
beta2 is 0.99 (the variance settles within the run; with DeepSpeed's
0.999 and no bias correction it is still growing ~1% a step after 200
steps of this toy and auto does not freeze: bench/compression.sh).

Checks and their tolerances:
- exactly one "freeze_step auto" line, at a step D with enough steps
  after it; the criterion's printed value is below the threshold (or D is
  the latest step allowed);
- the same run with the fixed --freeze-step=D gives the same losses and
  weights bit for bit (auto decides D, then is that run);
- steps 1..D: the losses equal AdamW's without bias correction to 1e-5
  relative (1-bit Adam's warm-up is that Adam), and each step hands the
  uncompressed step's bytes; steps after D: ds-run's count equals the
  plan's for the phase every step and is at least 5x fewer;
- with --optimizer=lamb the pair is 1-bit LAMB against Lamb without
  bias correction (at the same ZeRO stage; at ZeRO 1-3 1-bit LAMB's
  warm-up hands Lamb's bytes plus one 8-byte figure per tensor and rank),
  with the same checks;
- ds-opt --report=json says the freeze step is decided at run time;
- runs saved at steps D-2, D and D+2 and resumed give the uninterrupted
  run's losses and weights bit for bit, and the one resumed before the
  switch decides D again (the window's norms are in the checkpoint);
- a checkpoint saved with a fixed freeze step is refused by the auto plan.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

from seq_data import write_sequences

LINE = re.compile(r"freeze_step auto: the variance is frozen after step (\d+) "
                  r"\(\|\|v\|\| (\S+), its relative change over the last (\d+) "
                  r"steps (\S+?)(?: <|, the latest step; threshold) (\S+)\)")


def main():
    ap = argparse.ArgumentParser()
    for tool in ("--ds-opt", "--ds-run", "--mpirun", "--work", "--onnx"):
        ap.add_argument(tool, required=True)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=70)
    ap.add_argument("--lr", default="1e-3")
    ap.add_argument("--beta2", default="0.99")
    ap.add_argument("--zero", type=int, default=0)
    ap.add_argument("--optimizer", choices=("adam", "lamb"), default="adam")
    args = ap.parse_args()
    w = lambda f: os.path.join(args.work, f)
    n = args.ranks
    # The data of onebit_adam.py: arithmetic sequences mod 128, 8 batches.
    write_sequences(w("data.npz"), 8 * 2 * n)
    common = [args.onnx, "--input-shape=idx:2x32", "--input-shape=targets:2x32",
              f"--world-size={n}", f"--lr={args.lr}", f"--beta2={args.beta2}",
              f"--zero={args.zero}"]

    def compile_plan(name, flags):
        out = subprocess.run([args.ds_opt, *common, *flags, "--report=json",
                              "-o", w(name + ".plan")],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)["collectives"]

    def run(name, tag, steps, extra=()):
        p = subprocess.run(args.mpirun.split() + ["-np", str(n), args.ds_run, w(name + ".plan"),
                            "--steps", str(steps), "--data", w("data.npz"),
                            "--log-json", w(tag + ".json"), "--save-weights", w(tag + ".npz"),
                            "--threads", "1", *extra],
                           check=True, capture_output=True, text=True, timeout=600)
        return [json.loads(l) for l in open(w(tag + ".json"))], LINE.findall(p.stdout)

    def same_weights(a, b):
        wa, wb = np.load(w(a + ".npz")), np.load(w(b + ".npz"))
        return sorted(wa.files) == sorted(wb.files) and all(
            np.array_equal(wa[k], wb[k]) for k in wa.files)

    plain_opt = "lamb" if args.optimizer == "lamb" else "adamw"
    onebit = f"--optimizer=onebit-{args.optimizer}"
    compile_plan("plain", [f"--optimizer={plain_opt}", "--bias-correction=false"])
    rep = compile_plan("auto", [onebit, "--freeze-step=auto"])
    plain, _ = run("plain", "plain", args.steps)
    auto, lines = run("auto", "auto", args.steps)
    ok = len(lines) == 1
    if not ok:
        print(f"expected one freeze line, got {lines}")
        print("FAIL")
        sys.exit(1)
    d = int(lines[0][0])
    change, threshold = float(lines[0][3]), float(lines[0][4])
    print(f"freeze decided after step {d}: ||v|| {lines[0][1]}, relative change over "
          f"{lines[0][2]} steps {change:.4g} (threshold {threshold:g})")
    ok &= d <= args.steps - 5 and (change < threshold or d == 1000)
    rep_ok = rep.get("freeze_step_auto") is True
    print(f"report: freeze step decided at run time: {rep_ok}")
    ok &= rep_ok
    # The fixed freeze step D: the same run.
    compile_plan("fixed", [onebit, f"--freeze-step={d}"])
    fixed, flines = run("fixed", "fixed", args.steps)
    same_fixed = [s["loss"] for s in fixed] == [s["loss"] for s in auto] and \
        same_weights("fixed", "auto") and not flines
    print(f"--freeze-step={d}: losses and weights identical {same_fixed}")
    ok &= same_fixed
    warm = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(plain[:d], auto[:d]))
    print(f"warm-up (steps 1-{d}): max relative loss difference to {plain_opt} "
          f"{warm:.2e} (tolerance 1e-5)")
    ok &= warm <= 1e-5
    plain_bytes = plain[-1]["collective_bytes"]
    # The warm-up hands the uncompressed optimizer's bytes; 1-bit LAMB at
    # ZeRO 1-3 gathers one more 8-byte figure per tensor and rank than
    # Lamb (its factor's maximum ratio, compressed_pp.py).
    extra = rep["bytes_per_step"] - plain_bytes
    warm_bytes = all(s["collective_bytes"] == rep["bytes_per_step"]
                     for s in auto[:d]) and (
        extra == 0 or (args.optimizer == "lamb" and args.zero > 0 and
                       0 < extra <= plain_bytes // 100 and extra % (8 * n) == 0))
    after = [s["collective_bytes"] for s in auto[d:]]
    planned = all(s["collective_bytes"] == s["planned_collective_bytes"] for s in auto)
    ratio = plain_bytes / max(after)
    print(f"bytes per step: {rep['bytes_per_step']} until step {d} ({plain_opt}: "
          f"{plain_bytes}, as it: {warm_bytes}), "
          f"{max(after)} after ({ratio:.1f}x fewer); measured = planned every step: {planned}")
    ok &= warm_bytes and planned and ratio >= 5 and min(after) == max(after) \
        == rep["bytes_per_step_after_freeze"]
    for at in (d - 2, d, d + 2):
        ck = w(f"ck{at}")
        subprocess.run(["rm", "-rf", ck], check=True)
        run("auto", "first", at, ["--save", ck])
        rest, rlines = run("auto", "rest", args.steps, ["--resume", ck])
        same = [a["loss"] for a in auto[at:]] == [b["loss"] for b in rest]
        same_w = same_weights("auto", "rest")
        decided = [int(l[0]) for l in rlines]
        dec_ok = decided == ([d] if at < d else [])
        print(f"resumed at step {at}: losses identical {same}, weights identical {same_w}, "
              f"freeze lines {decided}")
        ok &= same and same_w and dec_ok
    # A checkpoint saved with a fixed freeze step has no window: refused.
    ck = w("ck_fixed")
    subprocess.run(["rm", "-rf", ck], check=True)
    run("fixed", "first", 5, ["--save", ck])
    p = subprocess.run(args.mpirun.split() + ["-np", str(n), args.ds_run, w("auto.plan"),
                        "--steps", "10", "--data", w("data.npz"), "--threads", "1",
                        "--resume", ck], capture_output=True, text=True, timeout=600)
    refused = p.returncode != 0 and "the checkpoint has no freeze_step auto state" in p.stderr
    print(f"resume of a fixed-freeze checkpoint refused: {refused}")
    ok &= refused
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
