#!/usr/bin/python3
"""Issue 22's acceptance run for one model of the zoo (models.py):

    zoo_parity.py MODEL --ds-opt ds-opt --ds-run ds-run --work DIR
        [--mpirun CMD] [--checks adam,sgd,zero3,bf16,recompute]

ds.export writes the model's training step; ds-opt compiles it and ds-run
trains 6 steps on the model's own batch (the same weights and data as the
torch loop), and:

  adam, sgd   6 steps of Adam (lr 1e-3) and of SGD with momentum 0.9
              (lr 1e-2): every loss within 1e-4 relative of torch.optim's
              on the same module (fp32 sums in another order drift apart
              by ~1e-6 per step; 1e-4 leaves room for 6 steps of it while
              a wrong gradient moves the second loss by far more).
  zero3       ZeRO-3 on 2 ranks (each its half of the batch, the export
              traced at the half batch; an input whose batch is not on
              axis 0, models.BATCH_AXES, is halved along its own axis)
              against 1 rank, Adam (or --zero3-optimizer=sgd): losses
              within 1e-5 relative (only the order of the ranks' sums
              differs).
              With BatchNormalization in the graph the 2-rank plan gets
              --sync-batchnorm, so that the statistics are the whole
              batch's as on one rank.
  bf16        Adam in bf16: every loss within 2% of torch's fp32 losses
              (bf16 keeps 8 bits of mantissa: ~0.4% per rounding).
  recompute   --recompute=auto under --device-memory: the budget is 70% of
              the plain plan's per-rank peak (the midpoint between the
              --recompute=full and plain peaks when 70% is below what full
              recompute needs). The planned peak must fit it, ds-run's
              measured peak must equal the planned one, and the losses equal
              the plain plan's within 1e-5 relative.

Dropout draws from a generator ds does not share with torch: the driver
sets every nn.Dropout's p to 0 before exporting (the op stays in the graph
as a ratio-0 Dropout). A model that ds-opt cannot import yet prints
`MODEL: not importable yet: <ds-opt's error>` and exits 2. Otherwise one
line per check and PASS or FAIL; exit 0 when every check passes."""

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "E2E"),
                os.path.join(HERE, "..", "..", "python")]
import ds  # noqa: E402
import models  # noqa: E402
import trainable_set  # noqa: E402  (its torch.optim loop)

warnings.filterwarnings("ignore")
STEPS = 6
LR = {"adam": 1e-3, "sgd": 1e-2}
MOMENTUM = 0.9
TOL = {"parity": 1e-4, "ranks": 1e-5, "bf16": 2e-2, "recompute": 1e-5}
ALL_CHECKS = ["adam", "sgd", "zero3", "bf16", "recompute"]


def no_dropout(model):
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


def torch_losses(model, inputs, optimizer):
    """STEPS steps of torch.optim on a copy of `model` (trainable_set's
    loop, at this harness's rates)."""
    return trainable_set.torch_losses(copy.deepcopy(model).train(), inputs,
                                      optimizer, lr=LR[optimizer])


def worst_rel(got, want):
    if len(got) != len(want) or not got:
        return float("inf")
    return max(abs(g - w) / max(abs(w), 1e-12) for g, w in zip(got, want))


class Tools:
    def __init__(self, args):
        self.args = args
        self.w = lambda f: os.path.join(args.work, f)

    def compile(self, onnx_path, plan, *flags):
        """ds-opt with --report=json; returns the report or exits."""
        cmd = [self.args.ds_opt, onnx_path, *flags, "--report=json", "-o", plan]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit("ds-opt failed: " + " ".join(cmd) + "\n" + r.stderr)
        return json.loads(r.stdout)

    def train(self, plan, tag, ranks=1):
        prefix = []
        if ranks > 1:
            prefix = self.args.mpirun.split() + ["-np", str(ranks)]
        log = self.w(tag + ".json")
        r = subprocess.run([*prefix, self.args.ds_run, plan, "--steps", str(STEPS),
                            "--data", self.w("data.npz"), "--threads", "1",
                            "--log-json", log], capture_output=True, text=True,
                           timeout=600)
        if r.returncode:
            sys.exit(f"ds-run failed on {plan}:\n{r.stdout}\n{r.stderr}")
        rows = [json.loads(line) for line in open(log)]
        return [row["loss"] for row in rows], rows


def opt_flags(optimizer):
    flags = [f"--optimizer={optimizer}", f"--lr={LR[optimizer]}"]
    return flags + ([f"--momentum={MOMENTUM}"] if optimizer == "sgd" else [])


def importable(tools, onnx_path, name):
    r = subprocess.run([tools.args.ds_opt, onnx_path, "--emit=summary",
                        "-o", tools.w("summary.txt")], capture_output=True, text=True)
    if r.returncode:
        err = next((l for l in r.stderr.splitlines() if "error" in l),
                   r.stderr.strip())
        print(f"{name}: not importable yet: {err.strip()}")
        sys.exit(2)


def check_ranks(tools, name, model, inputs, has_bn, optimizer, want):
    """ZeRO-3 on 2 ranks (the export at half the batch, halved along each
    input's batch axis) against 1 rank, with `optimizer`."""
    axes = models.BATCH_AXES.get(name, {})
    half = {k: v.narrow(axes.get(k, 0), 0, v.shape[axes.get(k, 0)] // 2)
            for k, v in inputs.items()}
    part = tools.w("half.onnx")
    ds.export(model, half, part)
    sync = ["--sync-batchnorm"] if has_bn else []
    tools.compile(part, tools.w("z3.plan"), *opt_flags(optimizer),
                  "--world-size=2", "--zero=3", "--reduce-bucket-size=1000",
                  "--prefetch-bucket-size=1000", *sync)
    got, _ = tools.train(tools.w("z3.plan"), "z3", ranks=2)
    err = worst_rel(got, want)
    return err <= TOL["ranks"], (f"zero3: 2 ranks against 1 ({optimizer}"
                                 f"{', --sync-batchnorm' if sync else ''}): "
                                 f"worst loss rel error {err:.1e} (tol {TOL['ranks']:g})")


def check_recompute(tools, onnx_path, plain_report, want):
    """--recompute=auto under a budget below the plain plan's peak."""
    none_peak = plain_report["per_rank_peak"]
    full = tools.compile(onnx_path, tools.w("full.plan"), *opt_flags("adam"),
                         "--recompute=full")
    full_peak = full["per_rank_peak"]
    budget = int(none_peak * 0.7)
    if budget < full_peak:
        budget = (full_peak + none_peak) // 2
    rep = tools.compile(onnx_path, tools.w("auto.plan"), *opt_flags("adam"),
                        "--recompute=auto", f"--device-memory={budget}")
    peak = rep["per_rank_peak"]
    got, rows = tools.train(tools.w("auto.plan"), "auto")
    measured = max(r["peak_bytes"] for r in rows)
    planned = max(r["planned_bytes"] for r in rows)
    err = worst_rel(got, want)
    ok = peak <= budget and measured <= planned and err <= TOL["recompute"] \
        and full_peak < none_peak
    return ok, (f"recompute: plain peak {none_peak}, full {full_peak}, budget {budget}: "
                f"planned {peak} (fits: {peak <= budget}), measured arena {measured} "
                f"<= planned {planned}: {measured <= planned}; losses against plain: "
                f"{err:.1e} (tol {TOL['recompute']:g})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(models.ZOO))
    for a in ("--ds-opt", "--ds-run", "--work"):
        ap.add_argument(a, required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--checks", default=",".join(ALL_CHECKS))
    ap.add_argument("--zero3-optimizer", choices=["adam", "sgd"], default="adam",
                    help="the optimizer of the zero3 check (sgd where Adam "
                         "amplifies f32 rounding noise; no zoo model needs "
                         "it now)")
    args = ap.parse_args()
    checks = args.checks.split(",")
    if set(checks) - set(ALL_CHECKS):
        sys.exit(f"unknown checks {set(checks) - set(ALL_CHECKS)}")
    os.makedirs(args.work, exist_ok=True)
    tools = Tools(args)
    name = args.model

    model, inputs = models.ZOO[name]()
    model = no_dropout(model)
    np.savez(tools.w("data.npz"), **{k: v.numpy() for k, v in inputs.items()})
    onnx_path = tools.w("model.onnx")
    proto = ds.export(model, inputs, onnx_path)
    importable(tools, onnx_path, name)
    has_bn = any(n.op_type == "BatchNormalization" for n in proto.graph.node)

    results, ref, ds_losses = [], {}, {}
    ref["adam"] = torch_losses(model, inputs, "adam")
    plain = None
    z3 = args.zero3_optimizer if "zero3" in checks else None
    for opt in ("adam", "sgd"):
        needed = opt == z3 or (opt == "adam" and "recompute" in checks)
        if opt not in checks and not needed:
            continue
        want = ref.setdefault(opt, torch_losses(model, inputs, opt))
        report = tools.compile(onnx_path, tools.w(opt + ".plan"), *opt_flags(opt))
        got, _ = tools.train(tools.w(opt + ".plan"), opt)
        ds_losses[opt] = got
        if opt == "adam":
            plain = report
        if opt in checks:
            err = worst_rel(got, want)
            results.append((err <= TOL["parity"],
                            f"{opt}: {STEPS} steps against torch.optim: worst loss rel "
                            f"error {err:.1e} (tol {TOL['parity']:g}); ds {got[0]:.6f} .. "
                            f"{got[-1]:.6f}"))
    if "zero3" in checks:
        results.append(check_ranks(tools, name, model, inputs, has_bn, z3,
                                   ds_losses[z3]))
    if "bf16" in checks:
        tools.compile(onnx_path, tools.w("bf16.plan"), *opt_flags("adam"),
                      "--precision=bf16")
        got, _ = tools.train(tools.w("bf16.plan"), "bf16")
        err = worst_rel(got, ref["adam"])
        results.append((err <= TOL["bf16"], f"bf16: against torch fp32: worst loss rel "
                                            f"error {err:.1e} (tol {TOL['bf16']:g})"))
    if "recompute" in checks:
        results.append(check_recompute(tools, onnx_path, plain, ds_losses["adam"]))
    for ok, line in results:
        print(f"{name} {line}")
    bad = [line for ok, line in results if not ok]
    print("FAIL: " + "; ".join(bad) if bad else "PASS")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
