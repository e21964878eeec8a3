#!/usr/bin/python3
"""1-bit Adam (docs/compression.md) on N MPI ranks against the uncompressed
optimizer it starts as: AdamW without bias correction (--optimizer=adamw
--bias-correction=false, the same lr, betas, eps and weight decay), on the
GPT example with the same global batch.

Checks and their tolerances:
- warm-up (steps 1..freeze): the losses equal the uncompressed run's to
  1e-5 relative (the same arithmetic; only the gradients' all-reduce is
  per tensor instead of per bucket);
- after the freeze: the bytes each step hands to collectives (ds-run's
  count) equal the plan's figure for that step and are at least 5x fewer
  than the uncompressed step's; ds-opt --report=json says the same;
- the mean loss of the last 8 steps (one pass over the data) is at most
  2% above the uncompressed run's (1-bit Adam's published claim: the same
  convergence; on this toy it ends lower, and the signed difference is
  printed). The freeze is at step 20 of 50: with beta2 0.999 and no bias
  correction the variance after 10 steps is ~1% of its value and 1-bit
  Adam diverges when it is frozen there (DeepSpeed tunes freeze_step to a
  stable variance too);
- runs saved at step freeze - 2 and at `--resume-at` (after the freeze)
  and resumed give the uninterrupted run's losses and weights bit for bit
  (the error buffers are optimizer state in the checkpoint).

With --two-sided the final loss must also be at most 2% below (the
1-bit LAMB run at lr 1e-3, where both end within 0.1%).

With --optimizer=lamb the pair is 1-bit LAMB (--optimizer=onebit-lamb)
against Lamb without bias correction (--optimizer=lamb
--bias-correction=false), at ZeRO-0, with the same checks: its warm-up is
that Lamb, its exchange after the freeze 1-bit Adam's.

With --zero=1, 2 or 3 both runs use that ZeRO stage. With --optimizer
lamb there, Lamb updates this rank's partition with the whole tensor's
trust ratio (each rank's partial sums of squares, all-gathered), so
--against-zero0 also runs Lamb at ZeRO-0 and checks every loss of Lamb at
the stage equal to it to 1e-5 relative (only the order of the sums
differs); and 1-bit LAMB's partition update gathers one more f64 per
tensor and rank than Lamb's (its factor's maximum), which the all-gather
bytes account for exactly. After the freeze
the gradient buckets' reduce-scatter is the compressed one and ZeRO's
parameter all-gathers are compressed too (the 1-bit update delta of each
replicated parameter at stages 1-2 and of stage 3's persistent ones, the
int8 gathers of stage 3's shards), so the 5x is checked on the whole
step, as at ZeRO-0; the report's after-freeze bytes are checked to be
the sum of its per-kind figures, its warm-up all-gathers the plain run's,
and ds-run's count equals the plan's every step; its arena high-water
mark equals the planned peak.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

from seq_data import write_sequences


def main():
    ap = argparse.ArgumentParser()
    for tool in ("--ds-opt", "--ds-run", "--mpirun", "--work", "--onnx"):
        ap.add_argument(tool, required=True)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--freeze", type=int, default=20)
    ap.add_argument("--resume-at", type=int, default=22)
    ap.add_argument("--lr", default="1e-3")
    ap.add_argument("--beta2", default="0.999")
    ap.add_argument("--zero", type=int, default=0)
    ap.add_argument("--optimizer", choices=("adam", "lamb"), default="adam")
    ap.add_argument("--against-zero0", action="store_true",
                    help="the uncompressed run's losses equal its ZeRO-0 "
                         "run's to 1e-5")
    ap.add_argument("--two-sided", action="store_true",
                    help="the final loss also at most 2%% below the "
                         "uncompressed run's")
    ap.add_argument("--opt-flag", action="append", default=[],
                    help="a ds-opt flag for every plan (e.g. "
                         "--reduce-bucket-size=1: one bucket per tensor)")
    args = ap.parse_args()
    w = lambda f: os.path.join(args.work, f)
    n = args.ranks
    # Arithmetic sequences (a start and a stride per row, mod 128), next
    # token as target: learnable, and 8 global batches, so that 50 steps
    # lower the loss without memorising one batch.
    write_sequences(w("onebit_data.npz"), 8 * 2 * n)
    shapes = ["--input-shape=idx:2x32", "--input-shape=targets:2x32"]
    common = [args.onnx, *shapes, f"--world-size={n}", f"--lr={args.lr}",
              f"--beta2={args.beta2}", f"--zero={args.zero}", *args.opt_flag]
    plain_opt = "lamb" if args.optimizer == "lamb" else "adamw"
    plans = {
        "plain": [f"--optimizer={plain_opt}", "--bias-correction=false"],
        "onebit": [f"--optimizer=onebit-{args.optimizer}",
                   f"--freeze-step={args.freeze}"],
    }
    if args.against_zero0:
        plans["plain0"] = plans["plain"] + ["--zero=0"]
    report = {}
    for name, flags in plans.items():
        out = subprocess.run([args.ds_opt, *common, *flags, "--report=json",
                              "-o", w(name + ".plan")],
                             check=True, capture_output=True, text=True).stdout
        report[name] = json.loads(out)["collectives"]

    def run(name, tag, steps, extra=()):
        subprocess.run(args.mpirun.split() + ["-np", str(n), args.ds_run, w(name + ".plan"),
                        "--steps", str(steps), "--data", w("onebit_data.npz"),
                        "--log-json", w(tag + ".json"), "--save-weights", w(tag + ".npz"),
                        "--threads", "1", *extra],
                       check=True, capture_output=True, text=True, timeout=600)
        return [json.loads(l) for l in open(w(tag + ".json"))]

    plain = run("plain", "plain", args.steps)
    onebit = run("onebit", "onebit", args.steps)
    ok = True
    if args.against_zero0:
        plain0 = run("plain0", "plain0", args.steps)
        d0 = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(plain0, plain))
        same0 = all(s["collective_bytes"] == s["planned_collective_bytes"] for s in plain)
        print(f"{plain_opt} at ZeRO-{args.zero} against ZeRO-0 (steps 1-{args.steps}): "
              f"max relative loss difference {d0:.2e} (tolerance 1e-5); "
              f"measured = planned every step: {same0}")
        ok &= d0 <= 1e-5 and len(plain0) == len(plain) == args.steps and same0
    f = args.freeze
    warm = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(plain[:f], onebit[:f]))
    print(f"warm-up (steps 1-{f}): max relative loss difference {warm:.2e} (tolerance 1e-5)")
    ok &= warm <= 1e-5
    after = onebit[f:]
    measured_eq = all(s["collective_bytes"] == s["planned_collective_bytes"] for s in onebit)
    plain_bytes = plain[-1]["collective_bytes"]
    one_bytes = max(s["collective_bytes"] for s in after)
    ratio = plain_bytes / one_bytes
    rep, rplain = report["onebit"], report["plain"]
    if args.zero > 0:  # each exchange: plain against compressed
        print(f"gradient reduce-scatter per step: uncompressed {rplain['reduce_scatter_bytes']}, "
              f"compressed {rep['compressed_reduce_scatter_bytes']} "
              f"({rplain['reduce_scatter_bytes'] / rep['compressed_reduce_scatter_bytes']:.1f}x fewer)")
        compressed_ag = rplain["all_gather_bytes"] - rep["all_gather_bytes_after_freeze"]
        print(f"parameter all-gathers per step: uncompressed {rplain['all_gather_bytes']} "
              f"(warm-up {rep['all_gather_bytes']}), of which {compressed_ag} compressed to "
              f"{rep['compressed_all_gather_bytes']} ({compressed_ag / rep['compressed_all_gather_bytes']:.1f}x fewer)")
        if args.optimizer == "lamb":
            # One more f64 per tensor and rank: the factor's maximum.
            ir = subprocess.run([args.ds_opt, *common, *plans["plain"], "--emit=mlir"],
                                check=True, capture_output=True, text=True).stdout
            tensors = ir.count("ds.adam ")  # Lamb's updates, one per tensor
            extra = rep["all_gather_bytes"] - rplain["all_gather_bytes"]
            print(f"partial figures of {tensors} tensors: 1-bit LAMB gathers {extra} bytes "
                  f"more than Lamb (expected {8 * n * tensors})")
            ok &= extra == 8 * n * tensors
        else:
            ok &= rplain["all_gather_bytes"] == rep["all_gather_bytes"]
    print(f"bytes per step: uncompressed {plain_bytes}, after the freeze {one_bytes} "
          f"({ratio:.1f}x fewer); measured = planned every step: {measured_eq}")
    ok &= ratio >= 5 and measured_eq
    # The memory plan: the arena's high-water mark is the planned peak.
    mem = [(s.get("peak_bytes"), s.get("planned_bytes")) for s in onebit]
    mem_ok = all(a is not None and a == b for a, b in mem)
    print(f"arena high-water = planned peak every step: {mem_ok} ({mem[-1][0]} bytes)")
    ok &= mem_ok
    # The report's figures: the same bytes as ds-run's, 5x fewer on the
    # exchange it compresses.
    kinds = sum(rep.get(k, 0) for k in (
        "all_reduce_bytes_after_freeze", "all_gather_bytes_after_freeze",
        "reduce_scatter_bytes_after_freeze", "compressed_all_reduce_bytes",
        "compressed_reduce_scatter_bytes", "compressed_all_gather_bytes"))
    rep_ok = (rep.get("freeze_step") == f
              and rep.get("bytes_per_step_after_freeze") == one_bytes
              and rplain["bytes_per_step"] == plain_bytes
              and (args.zero == 0 or one_bytes == kinds)
              and rep["ring_bytes_per_rank"] >= 5 * rep["compressed_ring_bytes_per_rank"])
    print(f"report: after the freeze {rep.get('bytes_per_step_after_freeze')} bytes per step, "
          f"ring bytes per rank {rep['ring_bytes_per_rank']} -> "
          f"{rep.get('compressed_ring_bytes_per_rank', 0):.0f}; agrees with ds-run: {rep_ok}")
    ok &= rep_ok
    # The loss over the last pass through the 8 batches (one step's loss
    # depends on its batch): 1-bit Adam must not end more than 2% above.
    # It ends below here (its sign updates move every element by the
    # chunk's RMS), so a two-sided 2% would fail for the better result;
    # the difference is printed either way.
    last_p = sum(s["loss"] for s in plain[-8:]) / 8
    last_o = sum(s["loss"] for s in onebit[-8:]) / 8
    rel = (last_o - last_p) / last_p
    bound = "within 2%" if args.two_sided else "at most +2%"
    print(f"mean loss of steps {args.steps - 7}-{args.steps}: uncompressed {last_p:.5f}, "
          f"1-bit {last_o:.5f} ({100 * rel:+.2f}%; {bound})")
    ok &= rel <= 0.02 and (not args.two_sided or rel >= -0.02)
    # Resume across the freeze: saved before it (the resumed run crosses
    # it) and after it (the error buffers come from the checkpoint).
    for at in (f - 2, args.resume_at):
        ck = w(f"onebit_ck{at}")
        subprocess.run(["rm", "-rf", ck], check=True)
        run("onebit", "first", at, ["--save", ck])
        rest = run("onebit", "rest", args.steps, ["--resume", ck])
        same = [a["loss"] for a in onebit[at:]] == [b["loss"] for b in rest]
        wa, wb = np.load(w("onebit.npz")), np.load(w("rest.npz"))
        same_w = sorted(wa.files) == sorted(wb.files) and all(
            np.array_equal(wa[k], wb[k]) for k in wa.files)
        print(f"resumed at step {at}: losses identical {same}, weights identical {same_w}")
        ok &= same and same_w
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
