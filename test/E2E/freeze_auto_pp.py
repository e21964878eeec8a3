#!/usr/bin/python3
"""`freeze_step: "auto"` with pipeline parallelism (docs/compression.md):
--pipeline-parallel=P x D data-parallel ranks, M micro-batches per step,
on the GPT example (2 stages; its tied embedding is held by both). Every
rank of every stage must freeze after the same optimizer step, decided
from the whole model's ||v|| (the stages' sums added over the world, the
tied embedding counted once).

Runs of the same data:
- "auto": the compressed optimizer with --freeze-step=auto and pipelines;
- "flat": the same optimizer and ZeRO stage with --freeze-step=auto
  WITHOUT pipelines on the D data-parallel ranks, each rank's batch the
  2M rows its pipeline ranks see in a step (the rows permuted as in
  compressed_pp.py). Until the freeze both run the uncompressed optimizer
  on the same gradients up to the order of f32 sums, so ||v|| and the
  decision are the same;
- "fixed": the pipeline with --freeze-step=D, D the step "auto" decided.

Checks and their tolerances:
- exactly one "freeze_step auto" line for the whole pipeline run (the
  world's lead prints it) and one for the flat run, at the same step D,
  with r_t below the threshold; ||v|| after step D (--log-json's v_norm)
  within 1e-5 relative of the flat run's (f32 sums in another order);
- "fixed" gives "auto"'s losses and weights bit for bit: every stage
  froze after step D (a stage that froze one step apart would change the
  losses);
- bytes: on every stage ds-run's count equals the plan's at every step
  (each stage's first rank reports it); on the last stage (--log-json)
  each step until D hands the report's warm-up figure and each after it
  the report's after-freeze figure, at least 5x fewer (4x at ZeRO-3,
  whose per-micro-batch parameter gathers stay int8);
- runs saved at steps D-2 and D+2 and resumed give the uninterrupted run's
  losses and weights bit for bit (each stage's checkpoint holds the
  window's norms and the decision), the one resumed before D deciding D
  again.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

import numpy as np

from compressed_pp import run_ranks
from freeze_auto import LINE
from seq_data import write_sequences
from zero_one_adam import same_weights


def main():
    ap = argparse.ArgumentParser()
    for tool in ("--ds-opt", "--ds-run", "--mpirun", "--work", "--onnx"):
        ap.add_argument(tool, required=True)
    ap.add_argument("--optimizer", default="onebit-adam",
                    choices=("onebit-adam", "onebit-lamb"))
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--dp", type=int, default=3)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--zero", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", default="1e-3")
    ap.add_argument("--beta2", default="0.9")
    ap.add_argument("--schedule", default="1f1b")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    w = lambda f: os.path.join(args.work, f)
    mpirun = shlex.split(args.mpirun)
    P, D, M = args.pp, args.dp, args.micro
    world = P * D

    # compressed_pp.py's data: flat rank r of step block t reads what
    # pipeline rank r reads in step t + 1, micro-batch by micro-batch.
    seq = write_sequences(w("data.npz"), 8 * M * D * 2)
    order = [((t * M + j) * D + r) * 2 + i for t in range(8) for r in range(D)
             for j in range(M) for i in range(2)]
    np.savez(w("flat.npz"), idx=seq[order, :32], targets=seq[order, 1:])

    common = [f"--lr={args.lr}", f"--beta2={args.beta2}", f"--zero={args.zero}",
              f"--optimizer={args.optimizer}"]
    pp = ["--input-shape=idx:2x32", "--input-shape=targets:2x32",
          f"--world-size={world}", f"--pipeline-parallel={P}",
          f"--micro-batches={M}", f"--schedule={args.schedule}"]
    flat = [f"--input-shape=idx:{2 * M}x32", f"--input-shape=targets:{2 * M}x32",
            f"--world-size={D}"]

    def compile_plan(name, flags):
        out = subprocess.run([args.ds_opt, args.onnx, *common, *flags,
                              "--report=json", "-o", w(name + ".plan")],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)

    def run(name, tag, steps, extra=()):
        log, stages, out = run_ranks(mpirun, args.ds_run, w, name, tag, steps,
                                     D if name == "flat" else world, extra)
        return log, stages, LINE.findall(out)

    rep = compile_plan("auto", pp + ["--freeze-step=auto"])
    compile_plan("flat", flat + ["--freeze-step=auto"])
    auto, auto_st, lines = run("auto", "auto", args.steps)
    flat_log, _, flines = run("flat", "flat", args.steps)
    print(f"pipeline: {P} stages x {D} data-parallel ranks, {M} micro-batches "
          f"of 2 rows per step, {args.schedule}, ZeRO-{args.zero}, "
          f"{args.optimizer}, beta2 {args.beta2}")
    if len(lines) != 1 or len(flines) != 1:
        print(f"expected one freeze line each, got {lines} and {flines}")
        print("FAIL")
        sys.exit(1)
    d, d_flat = int(lines[0][0]), int(flines[0][0])
    change, threshold = float(lines[0][3]), float(lines[0][4])
    norm, norm_flat = auto[d - 1]["v_norm"], flat_log[d - 1]["v_norm"]
    rel = abs(norm - norm_flat) / norm_flat
    print(f"freeze decided after step {d}: ||v|| {norm:.6g}, r_t {change:.4g} "
          f"(threshold {threshold:g})")
    print(f"without pipelines: after step {d_flat}, r_t {float(flines[0][3]):.4g}; "
          f"same step: {d == d_flat}; ||v|| relative difference {rel:.2e} "
          f"(tolerance 1e-5)")
    ok = d == d_flat and change < threshold and rel <= 1e-5 and d + 5 <= args.steps

    compile_plan("fixed", pp + [f"--freeze-step={d}"])
    fixed, _, xlines = run("fixed", "fixed", args.steps)
    same = [s["loss"] for s in fixed] == [s["loss"] for s in auto] and \
        same_weights(w("fixed.npz"), w("auto.npz")) and not xlines
    print(f"--freeze-step={d}: losses and weights identical {same}")
    ok &= same

    stages = rep["pipeline"]["per_stage"]
    # ZeRO-3 gathers the parameters for every micro-batch, int8 after the
    # freeze (compressed-pp.test: 4.8x / 4.4x below its warm-up).
    need = 4 if args.zero == 3 else 5
    for st in range(P):
        meas, plan, good, ran, high, peak = auto_st[st]
        # The rank's model chunks: st, st + P, ... (interleaved schedules).
        cs = [stages[c]["footprint"]["collectives"]
              for c in range(st, len(stages), P)]
        warm = sum(c["bytes_per_step"] for c in cs)
        after = sum(c["bytes_per_step_after_freeze"] for c in cs)
        every = good == ran == args.steps and meas == plan == after
        if st == P - 1:
            every &= all(s["collective_bytes"] == s["planned_collective_bytes"]
                         == (after if s["step"] > d else warm) for s in auto)
        print(f"stage {st}: bytes per step {warm} until step {d}, {after} after "
              f"({warm / after:.1f}x fewer, at least {need}x); measured = planned "
              f"every step: {every}")
        ok &= every and warm >= need * after

    for at in (d - 2, d + 2):
        ck = w(f"ck{at}")
        subprocess.run(["rm", "-rf", ck], check=True)
        run("auto", "first", at, ["--save", ck])
        rest, _, rlines = run("auto", "rest", args.steps, ["--resume", ck])
        same = [a["loss"] for a in auto[at:]] == [b["loss"] for b in rest]
        same_w = same_weights(w("auto.npz"), w("rest.npz"))
        decided = [int(l[0]) for l in rlines]
        dec_ok = decided == ([d] if at < d else [])
        print(f"resumed at step {at}: losses identical {same}, weights identical "
              f"{same_w}, freeze lines {decided}")
        ok &= same and same_w and dec_ok
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
