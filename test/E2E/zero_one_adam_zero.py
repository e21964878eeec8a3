#!/usr/bin/python3
"""0/1 Adam under ZeRO stage 1 or 2 (docs/compression.md, "0/1 Adam with
ZeRO 1-2") on N MPI ranks against AdamW without bias correction at the
same stage (--optimizer=adamw --bias-correction=false, the same lr, betas
and eps), on the GPT example with the same global batch, 50 steps, and the
policy of zero_one_adam.py (var_freeze_step 20, var_update_scaler 16,
local_step_scaler 4, local_step_clipper 8: variance steps 1-17 and 19,
compressed-gradient steps 18 and 20, local steps from 21 synchronising at
21-25, 27, 31, 39 and 47; `policy` is zero_one_adam.py's transcription of
DeepSpeed's zoadam.py).

Checks and their tolerances:
- the losses of steps 1 .. c (c the first compressed-gradient step, 18)
  equal the uncompressed run's to 1e-5 relative: every update before c is
  Adam's at that stage (the plain reduce-scatter, m and v of the
  partition, the plain all-gather);
- bytes: ds-run's count equals the plan's figure at every step, each
  step's bytes are the report's figure for its policy phase, and the mean
  over the local-step phase (steps 21-50) is at least 10x below the
  uncompressed step's;
- memory: the arena's high-water mark equals the planned peak at every
  step; the optimizer state is 1-bit Adam's at that stage plus exactly the
  sync base (one f32 per element of each parameter's partition);
- the mean loss of the last 8 steps (one pass over the 8 batches) within
  2% of the uncompressed run's, both printed;
- runs saved before the freeze (step 18) and inside a local-step interval
  (step 35, between the synchronisations of 31 and 39: the replicas differ
  between the ranks there) and resumed give the uninterrupted run's losses
  and weights bit for bit.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_one_adam import policy  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for tool in ("--ds-opt", "--ds-run", "--mpirun", "--work", "--onnx"):
        ap.add_argument(tool, required=True)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--zero", type=int, default=1)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--var-freeze", type=int, default=20)
    ap.add_argument("--var-scaler", type=int, default=16)
    ap.add_argument("--local-scaler", type=int, default=4)
    ap.add_argument("--clipper", type=int, default=8)
    ap.add_argument("--lr", default="1e-3")
    ap.add_argument("--beta2", default="0.995")
    args = ap.parse_args()
    w = lambda f: os.path.join(args.work, f)
    n = args.ranks
    rng = np.random.RandomState(0)
    rows = 8 * 2 * n
    start = rng.randint(0, 128, size=(rows, 1))
    stride = rng.randint(1, 8, size=(rows, 1))
    seq = (start + stride * np.arange(33)[None, :]) % 128
    np.savez(w("zo_data.npz"), idx=seq[:, :32], targets=seq[:, 1:])
    shapes = ["--input-shape=idx:2x32", "--input-shape=targets:2x32"]
    common = [args.onnx, *shapes, f"--world-size={n}", f"--lr={args.lr}",
              f"--beta2={args.beta2}", f"--zero={args.zero}"]
    plans = {
        "plain": ["--optimizer=adamw", "--bias-correction=false"],
        "onebit": ["--optimizer=onebit-adam", f"--freeze-step={args.var_freeze}"],
        "zo": ["--optimizer=zero-one-adam", f"--var-freeze-step={args.var_freeze}",
               f"--var-update-scaler={args.var_scaler}",
               f"--local-step-scaler={args.local_scaler}",
               f"--local-step-clipper={args.clipper}"],
    }
    report = {}
    for name, flags in plans.items():
        out = subprocess.run([args.ds_opt, *common, *flags, "--report=json",
                              "-o", w(name + ".plan")],
                             check=True, capture_output=True, text=True).stdout
        report[name] = json.loads(out)

    def run(name, tag, steps, extra=()):
        subprocess.run(args.mpirun.split() + ["-np", str(n), args.ds_run, w(name + ".plan"),
                        "--steps", str(steps), "--data", w("zo_data.npz"),
                        "--log-json", w(tag + ".json"), "--save-weights", w(tag + ".npz"),
                        "--threads", "1", *extra],
                       check=True, capture_output=True, text=True, timeout=600)
        return [json.loads(l) for l in open(w(tag + ".json"))]

    plain = run("plain", "plain", args.steps)
    zo = run("zo", "zo", args.steps)
    phases = policy(args.steps, args.var_freeze, args.var_scaler, args.local_scaler, args.clipper)
    ok = True
    c = phases.index("compressed") + 1
    warm = max(abs(a["loss"] - b["loss"]) / abs(a["loss"])
               for a, b in zip(plain[:c], zo[:c]))
    print(f"ZeRO-{args.zero}: variance steps 1-{c - 1} then the first compressed step {c}: "
          f"losses of steps 1-{c} max relative difference {warm:.2e} (tolerance 1e-5)")
    ok &= warm <= 1e-5
    col = report["zo"]["collectives"]
    by_phase = {"variance": col["bytes_per_variance_step"],
                "compressed": col["bytes_per_compressed_step"],
                "sync": col["bytes_per_compressed_step"],
                "local": col["bytes_per_local_step"]}
    measured_eq = all(s["collective_bytes"] == s["planned_collective_bytes"] for s in zo)
    phase_eq = all(s["collective_bytes"] == by_phase[p] for s, p in zip(zo, phases))
    plain_bytes = plain[-1]["collective_bytes"]
    local = zo[args.var_freeze:]
    mean_local = sum(s["collective_bytes"] for s in local) / len(local)
    ratio = plain_bytes / mean_local
    syncs = [t + 1 for t, p in enumerate(phases) if p == "sync"]
    print(f"phases: variance {col['bytes_per_variance_step']}, compressed/sync "
          f"{col['bytes_per_compressed_step']}, local {col['bytes_per_local_step']} bytes per step; "
          f"synchronisations at {syncs}")
    print(f"bytes per step: uncompressed {plain_bytes}, local-step phase (steps "
          f"{args.var_freeze + 1}-{args.steps}) mean {mean_local:.0f} ({ratio:.1f}x fewer; "
          f"at least 10x); measured = planned every step: {measured_eq}; "
          f"each step's bytes are its policy phase's: {phase_eq}")
    ok &= ratio >= 10 and measured_eq and phase_eq
    mem = [(s.get("peak_bytes"), s.get("planned_bytes")) for s in zo]
    mem_ok = all(a is not None and a == b for a, b in mem)
    print(f"arena high-water = planned peak every step: {mem_ok} ({mem[-1][0]} bytes)")
    ok &= mem_ok
    # The state: 1-bit Adam's at this stage plus the sync base, one f32 per
    # element of each trainable parameter's partition (its gather error's
    # size: the flattened parameter padded to N chunks).
    state = {k: report[k]["memory"]["optimizer_state"] for k in ("zo", "onebit", "plain")}
    wp, wz = np.load(w("plain.npz")), np.load(w("zo.npz"))
    trained = [k for k in wp.files if not np.array_equal(wp[k], wz[k])]
    ok &= len(trained) == report["zo"]["trainable_set"]["trainable"]
    want = sum(4 * ((wp[k].size + n - 1) // n) for k in trained)
    extra = state["zo"] - state["onebit"]
    print(f"optimizer state: {state['zo']} bytes (Adam's {state['plain']}, 1-bit Adam's "
          f"{state['onebit']}); 0/1 Adam's extra {extra} is the sync bases: {extra == want}")
    ok &= extra == want
    last_p = sum(s["loss"] for s in plain[-8:]) / 8
    last_z = sum(s["loss"] for s in zo[-8:]) / 8
    rel = (last_z - last_p) / last_p
    print(f"mean loss of steps {args.steps - 7}-{args.steps}: uncompressed {last_p:.5f}, "
          f"0/1 Adam {last_z:.5f} ({100 * rel:+.2f}%; within 2%)")
    ok &= abs(rel) <= 0.02
    for at in (args.var_freeze - 2, 35):
        ck = w(f"zo_ck{at}")
        subprocess.run(["rm", "-rf", ck], check=True)
        run("zo", "first", at, ["--save", ck])
        rest = run("zo", "rest", args.steps, ["--resume", ck])
        same = [a["loss"] for a in zo[at:]] == [b["loss"] for b in rest]
        wa, wb = np.load(w("zo.npz")), np.load(w("rest.npz"))
        same_w = sorted(wa.files) == sorted(wb.files) and all(
            np.array_equal(wa[k], wb[k]) for k in wa.files)
        print(f"resumed at step {at}: losses identical {same}, weights identical {same_w}")
        ok &= same and same_w
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
