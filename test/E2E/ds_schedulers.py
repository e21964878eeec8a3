"""DeepSpeed's learning-rate schedulers in a ds_config.json: ds-run's rate
at each step against DeepSpeed's formulas and step semantics, written out
here from DeepSpeed's lr_schedules.py (v0.16): the engine steps the
scheduler after each applied update, starting from last_batch_iteration =
-1 when it is built, so update t runs with the value at iteration t - 2
(the scheduler's initial value for t = 1).

usage: ds_schedulers.py DS_OPT DS_RUN MODEL DATA WORKDIR
"""
import json
import math
import os
import subprocess
import sys

ds_opt, ds_run, model, data, work = sys.argv[1:6]
STEPS = 12
BASE_LR = 0.002  # the optimizer's lr (WarmupCosineLR scales it)


def warmup_gamma(i, w, kind):
    return math.log(i + 1) / math.log(w) if kind == "log" else i / w


def warmup_lr(p, i, decay):
    lo, hi = p.get("warmup_min_lr", 0.0), p.get("warmup_max_lr", 0.001)
    if i < 0:
        return lo
    w = max(2, p.get("warmup_num_steps", 1000))
    if i < w:
        g = warmup_gamma(i, w, p.get("warmup_type", "log"))
    elif decay:
        t = p["total_num_steps"]
        g = max(0.0, (t - i) / max(1.0, t - w))
    else:
        g = 1.0
    return lo + (hi - lo) * g


def cosine_lr(p, i):
    if i < 0:
        return 0.0
    w = max(2, p.get("warmup_num_steps", 1000))
    if i < w:
        r = warmup_gamma(i, w, p.get("warmup_type", "log"))
        m = p.get("warmup_min_ratio", 0.0)
        return BASE_LR * (m + r * (1 - m))
    c = p.get("cos_min_ratio", 0.0001)
    r = (1 + math.cos(math.pi * (i - w + 1) / (p["total_num_steps"] - w))) / 2
    return BASE_LR * max(0.0, c + (1 - c) * r)


def one_cycle_lr(p, i):
    lo, hi = p["cycle_min_lr"], p["cycle_max_lr"]
    first = float(p.get("cycle_first_step_size", 2000))
    second = float(p.get("cycle_second_step_size", first))
    size = first + second
    ratio = first / size
    if i < size:
        b = i + 1
        cycle = math.floor(1 + b / size)
        x = 1.0 + b / size - cycle
        s = x / ratio if x <= ratio else (x - 1) / (ratio - 1)
        return lo + (hi - lo) * s
    d = p.get("decay_step_size", 0)
    if d == 0:
        return lo
    return lo / (1 + p.get("decay_lr_rate", 0.0) * (i - size + 1) / d)


def range_test_lr(p, i):
    lo = p.get("lr_range_test_min_lr", 1e-3)
    if i < 0:
        return lo
    n = (i + 1) / p.get("lr_range_test_step_size", 2000)
    if p.get("lr_range_test_staircase", False):
        n = math.floor(n)
    return lo * (1 + p.get("lr_range_test_step_rate", 1.0) * n)


CASES = [
    ("WarmupLR", {"warmup_min_lr": 1e-4, "warmup_max_lr": 3e-3,
                  "warmup_num_steps": 5}, lambda p, i: warmup_lr(p, i, False)),
    ("WarmupLR", {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                  "warmup_num_steps": 4, "warmup_type": "linear"},
     lambda p, i: warmup_lr(p, i, False)),
    ("WarmupDecayLR", {"warmup_min_lr": 0, "warmup_max_lr": 2e-3,
                       "warmup_num_steps": 3, "total_num_steps": 10},
     lambda p, i: warmup_lr(p, i, True)),
    ("WarmupCosineLR", {"total_num_steps": 11, "warmup_num_steps": 4,
                        "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01,
                        "warmup_type": "linear"}, cosine_lr),
    ("OneCycle", {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3,
                  "cycle_first_step_size": 3, "cycle_second_step_size": 4,
                  "decay_step_size": 2, "decay_lr_rate": 0.5,
                  "cycle_momentum": False}, one_cycle_lr),
    ("LRRangeTest", {"lr_range_test_min_lr": 1e-4,
                     "lr_range_test_step_size": 3,
                     "lr_range_test_step_rate": 2.0,
                     "lr_range_test_staircase": True}, range_test_lr),
]

worst = 0.0
for n, (kind, params, formula) in enumerate(CASES):
    cfg = {"optimizer": {"type": "AdamW", "params": {"lr": BASE_LR}},
           "scheduler": {"type": kind, "params": params}}
    path = os.path.join(work, f"sched{n}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    plan = os.path.join(work, f"sched{n}.plan")
    log = os.path.join(work, f"sched{n}.jsonl")
    subprocess.run([ds_opt, model, "--config", path, "-o", plan], check=True)
    subprocess.run([ds_run, plan, "--steps", str(STEPS), "--data", data,
                    "--log-json", log], check=True, stdout=subprocess.DEVNULL)
    got = [json.loads(line)["lr"] for line in open(log)]
    want = [formula(params, t - 2) for t in range(1, STEPS + 1)]
    assert len(got) == STEPS, (kind, got)
    for t, (g, w) in enumerate(zip(got, want), 1):
        err = abs(g - w) / max(abs(w), 1e-12)
        worst = max(worst, err)
        if err > 1e-9:
            sys.exit(f"{kind} step {t}: ds-run's lr {g!r}, DeepSpeed's {w!r}")
    print(f"{kind} {params.get('warmup_type', '')}: {STEPS} steps match "
          f"(first {got[0]:.6g}, last {got[-1]:.6g})")
print(f"all schedulers match DeepSpeed's formulas (worst relative "
      f"difference {worst:.1e}, tolerance 1e-9)")
