#!/usr/bin/python3
"""The compressed optimizers (docs/compression.md) against their plain
twins on N CPU ranks (mpirun), on the bundled GPT (export_gpt.py --dynamic,
2x32 tokens per rank):

1. bytes handed to collectives per step (ds-run's count, which it checks
   against the plan's) and step time (ds-run's time_ms, median of the
   steps after the freeze), plain against compressed: AdamW (no bias
   correction) against 1-bit Adam, the same against 0/1 Adam, Lamb (no
   bias correction) against 1-bit LAMB;
2. 200-step loss curves of AdamW, 1-bit Adam and 0/1 Adam (a few points
   and the mean of the last 8 steps, one pass over the 8 batches);
3. the planner's step simulator on GPT-2 small's shapes over 4 nodes x 1
   device at 100 and 10 Gbps (ds-opt --cluster, docs/planner.md
   "Compressed communication"): the predicted step of plain and compressed
   layouts (the compressed optimizers after the freeze, with their warm-up
   step), and what --plan=auto --plan-compression=auto chooses. Only this
   section: DS_BENCH_PLANNER_ONLY=1 bench/compression.sh.
4. 1-bit Adam with freeze_step auto over 200 steps next to AdamW and the
   fixed freeze at 20: the step ds-run chose, the criterion's trace
   (||v|| and its relative change, ds-run's --log-json) and the loss
   curve's largest relative distance to AdamW's (8-step means). Only this
   section: DS_BENCH_FREEZE_AUTO_ONLY=1 bench/compression.sh.

usage: compression.py BUILD_BIN WORKDIR [RANKS] [MPIRUN]"""
import json
import os
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN, WORK = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 3
MPIRUN = (sys.argv[4] if len(sys.argv) > 4 else
          "mpirun --oversubscribe --allow-run-as-root").split()
w = lambda f: os.path.join(WORK, f)
os.makedirs(WORK, exist_ok=True)
PY = "/usr/bin/python3"
FREEZE = 20
# 0/1 Adam's policy of test/E2E/zero-one-adam.test (beta2 0.995, which it
# needs on this toy: docs/compression.md).
ZO = ["--var-freeze-step=20", "--var-update-scaler=16",
      "--local-step-scaler=4", "--local-step-clipper=8"]
OPT = {
    "adamw": ["--optimizer=adamw", "--bias-correction=false"],
    "adamw-b2": ["--optimizer=adamw", "--bias-correction=false", "--beta2=0.995"],
    "onebit-adam": ["--optimizer=onebit-adam", f"--freeze-step={FREEZE}"],
    "onebit-adam-auto": ["--optimizer=onebit-adam", "--freeze-step=auto"],
    "zero-one-adam": ["--optimizer=zero-one-adam", "--beta2=0.995", *ZO],
    "lamb": ["--optimizer=lamb", "--bias-correction=false"],
    "onebit-lamb": ["--optimizer=onebit-lamb", f"--freeze-step={FREEZE}"],
}


def tool(name):
    return os.path.join(BIN, name)


def compile_plan(onnx, name, extra=()):
    out = subprocess.run([tool("ds-opt"), onnx, "--input-shape=idx:2x32",
                          "--input-shape=targets:2x32", f"--world-size={N}",
                          *OPT[name], *extra, "--report=json",
                          "-o", w(name + ".plan")],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def train(name, steps):
    return train_out(name, steps)[0]


def train_out(name, steps):
    log = w(name + ".json")
    p = subprocess.run(MPIRUN + ["-np", str(N), tool("ds-run"), w(name + ".plan"),
                             "--steps", str(steps), "--data", w("data.npz"),
                             "--log-json", log, "--threads", "1"],
                   check=True, capture_output=True, text=True, timeout=900)
    steps = [json.loads(l) for l in open(log)]
    assert all(s["collective_bytes"] == s["planned_collective_bytes"] for s in steps), \
        name + ": ds-run's bytes differ from the plan's"
    return steps, p.stdout


def main():
    onnx = w("gpt_dyn.onnx")
    if not os.path.exists(onnx):
        subprocess.run([PY, os.path.join(ROOT, "examples/gpt/export_gpt.py"),
                        "--dynamic", "-o", onnx], check=True,
                       capture_output=True)
    rng = np.random.RandomState(0)
    rows = 8 * 2 * N  # 8 global batches of arithmetic sequences (the tests')
    start = rng.randint(0, 128, size=(rows, 1))
    stride = rng.randint(1, 8, size=(rows, 1))
    seq = (start + stride * np.arange(33)[None, :]) % 128
    np.savez(w("data.npz"), idx=seq[:, :32], targets=seq[:, 1:])

    if os.environ.get("DS_BENCH_FREEZE_AUTO_ONLY"):
        return freeze_auto(onnx)
    print(f"== 1. bytes per step and step time on {N} CPU ranks "
          f"(GPT example, 2x32 tokens per rank; after step {FREEZE})")
    runs = {}
    for name in OPT:
        if name == "onebit-adam-auto":
            continue  # section 4
        compile_plan(onnx, name)
        runs[name] = train(name, 200 if name in ("adamw", "adamw-b2", "onebit-adam",
                                                  "zero-one-adam") else 40)
    print(f"{'optimizer':<15}{'bytes/step':>12}{'step ms':>10}")
    figures = {}
    for name, steps in runs.items():
        after = steps[FREEZE:]
        b = statistics.mean(s["collective_bytes"] for s in after)
        ms = statistics.median(s["time_ms"] for s in after)
        figures[name] = (b, ms)
        print(f"{name:<15}{b:>12.0f}{ms:>10.2f}")
    for plain, comp in (("adamw", "onebit-adam"), ("adamw-b2", "zero-one-adam"),
                        ("lamb", "onebit-lamb")):
        (pb, pm), (cb, cm) = figures[plain], figures[comp]
        print(f"{comp} against {plain}: {pb / cb:.1f}x fewer bytes, "
              f"step time x{cm / pm:.2f}")

    print("== 2. 200-step loss curves (mean of 8 steps around each point; "
          "8 batches per pass)")
    points = [8, 25, 50, 100, 150, 200]
    print(f"{'optimizer':<15}" + "".join(f"{'step ' + str(p):>11}" for p in points))
    for name in ("adamw", "onebit-adam", "adamw-b2", "zero-one-adam"):
        losses = [s["loss"] for s in runs[name]]
        row = [statistics.mean(losses[p - 8:p]) for p in points]
        print(f"{name:<15}" + "".join(f"{x:>11.4f}" for x in row))

    planner()
    freeze_auto(onnx)


# The planner's figures (section 3): GPT-2 small's shapes (export_gpt.py
# --shapes-only: 124M trainable parameters, 1x128 tokens per rank), 4
# nodes x 1 device with h100-80g's device figures, the inter-node link at
# 100 or 10 Gbps (10 us per message step).
PLANNER_RUNS = [  # (label, ZeRO stage, plain options, compressed options)
    ("AdamW / 1-bit Adam, ZeRO-0", 0, ["--optimizer=adamw", "--bias-correction=false"],
     ["--optimizer=onebit-adam", "--freeze-step=100"]),
    ("Lamb / 1-bit LAMB, ZeRO-0", 0, ["--optimizer=lamb", "--bias-correction=false"],
     ["--optimizer=onebit-lamb", "--freeze-step=100"]),
    ("AdamW / 1-bit Adam, ZeRO-3", 3, ["--optimizer=adamw", "--bias-correction=false"],
     ["--optimizer=onebit-adam", "--freeze-step=100"]),
    ("AdamW / qwZ+qgZ, ZeRO-3", 3, ["--optimizer=adamw"],
     ["--optimizer=adamw", "--quantize-weights", "--quantize-gradients"]),
]


def predicted(model, cfile, extra):
    out = subprocess.run([tool("ds-opt"), model, "--world-size=4", *extra,
                          f"--cluster={cfile}", "--report=json", "-o", w("g2.plan")],
                         check=True, capture_output=True, text=True).stdout
    p = json.loads(out)["predicted"]
    return p["step_time_s"], p.get("warmup_step_time_s", p["step_time_s"])


def planner():
    """The step simulator's predicted step of each plain and compressed
    layout (the compressed optimizers after the freeze, their warm-up
    beside it), and what --plan=auto --plan-compression=auto chooses."""
    print("== 3. the planner's step simulator: GPT-2 small shapes (1x128 tokens "
          "per rank), 4 nodes x 1 device (h100-80g figures), inter-node 100 and "
          "10 Gbps")
    gpt2 = w("gpt2-small-shapes.onnx")
    if not os.path.exists(gpt2):
        subprocess.run([PY, os.path.join(ROOT, "examples/gpt/export_gpt.py"),
                        "--size", "gpt2-small", "--shapes-only", "-o", gpt2],
                       check=True, capture_output=True)
    print(f"{'link':<9}{'layout':<30}{'plain ms':>10}{'compressed ms':>15}"
          f"{'warm-up ms':>12}{'speed-up':>10}")
    for gbps in (100, 10):
        cluster = {"name": f"4x1-{gbps}gbps", "nodes": 4, "devices_per_node": 1,
                   "device": {"kind": "gpu", "memory": 85899345920,
                              "flops": {"fp32": 6.7e13},
                              "memory_bandwidth": 3.35e12},
                   "intra_node": {"bandwidth": 4.5e11, "latency": 2e-6},
                   "inter_node": {"bandwidth": gbps * 1e9 / 8, "latency": 1e-5},
                   "kernels": {"launch_overhead": 5e-6}}
        cfile = w(f"cluster-{gbps}.json")
        json.dump(cluster, open(cfile, "w"))
        for label, zero, plain, comp in PLANNER_RUNS:
            ps, _ = predicted(gpt2, cfile, [f"--zero={zero}", *plain])
            cs, warm = predicted(gpt2, cfile, [f"--zero={zero}", *comp])
            print(f"{str(gbps) + ' Gbps':<9}{label:<30}{ps * 1e3:>10.2f}"
                  f"{cs * 1e3:>15.2f}{warm * 1e3:>12.2f}{ps / cs:>9.2f}x")
        for fixed in ([], ["--pipeline-parallel=1", "--tensor-parallel=1"]):
            print(search(gpt2, cfile, gbps, fixed))


def search(gpt2, cfile, gbps, fixed):
    """What --plan=auto --plan-compression=auto chooses on `cfile` (with the
    layout flags `fixed`), and the best plain and compressed candidates."""
    out = subprocess.run([tool("ds-opt"), gpt2, "--plan=auto",
                          f"--cluster={cfile}", "--global-batch=4",
                          "--optimizer=adamw", "--freeze-step=100",
                          "--plan-compression=auto", "--report=json",
                          "--plan-compiles=48", *fixed, "-o", w("auto.plan")],
                         check=True, capture_output=True, text=True).stdout
    plan = json.loads(out)["plan"]
    best = {}
    for c in plan["candidates"]:
        if c["state"] == "fits":
            key = c["compression"] != "none"
            if key not in best or c["step_time_s"] < best[key]["step_time_s"]:
                best[key] = c
    line = (f"{gbps} Gbps --plan=auto --plan-compression=auto {' '.join(fixed)}: "
            f"chosen {plan['chosen']}")
    for key, name in ((False, "plain"), (True, "compressed")):
        if key in best:
            line += (f"; best {name} {best[key]['layout']} "
                     f"{best[key]['step_time_s'] * 1e3:.2f} ms")
    return line


def freeze_auto(onnx):
    """Section 4, at DeepSpeed's beta2 0.999 and at 0.99 (no bias
    correction: the variance after t steps is 1 - beta2^t of its steady
    value, so at 0.999 it is still growing after 200 steps)."""
    print("== 4. 1-bit Adam with freeze_step auto, 200 steps, against AdamW "
          "and the freeze at 20 (mean of 8 steps around each point)")
    points = [25, 50, 100, 150, 200]
    for b2 in ("0.999", "0.99"):
        runs, out = {}, ""
        for name in ("adamw", "onebit-adam", "onebit-adam-auto"):
            compile_plan(onnx, name, [f"--beta2={b2}"])
            runs[name], o = train_out(name, 200)
            out = o if name == "onebit-adam-auto" else out
        line = [l[l.index("freeze_step auto:"):] for l in out.splitlines()
                if "freeze_step auto:" in l]
        print(f"beta2 {b2}: " + (line[0] if line else "no freeze within 200 steps"))
        trace = [(s["step"], s["v_norm"], s.get("freeze_change"))
                 for s in runs["onebit-adam-auto"] if "v_norm" in s]
        print("  criterion (step: ||v||, relative change over the window): " +
              "; ".join(f"{t}: {v:.3g}, {'-' if c is None else f'{c:.3f}'}"
                        for t, v, c in trace if t % 20 == 0 or t == trace[-1][0]))
        print(f"  {'optimizer':<17}" + "".join(f"{'step ' + str(p):>11}" for p in points)
              + f"{'largest rel. diff':>19}{'last 8':>9}")
        mean8 = lambda st: [statistics.mean([s["loss"] for s in st][p - 8:p])
                            for p in range(8, 201)]
        ref = mean8(runs["adamw"])
        for name, st in runs.items():
            m = mean8(st)
            dev = max((x - r) / r for x, r in zip(m, ref))
            low = min((x - r) / r for x, r in zip(m, ref))
            big = dev if abs(dev) >= abs(low) else low
            row = [m[p - 8] for p in points]
            print(f"  {name:<17}" + "".join(f"{x:>11.4f}" for x in row) +
                  f"{100 * big:>+18.1f}%{100 * (m[-1] - ref[-1]) / ref[-1]:>+8.1f}%")
        after = [s["collective_bytes"] for s in runs["onebit-adam-auto"] if "v_norm" not in s]
        if after:
            print(f"  bytes per step after the freeze {statistics.mean(after):.0f} "
                  f"against AdamW's {runs['adamw'][-1]['collective_bytes']}")


if __name__ == "__main__":
    if os.environ.get("DS_BENCH_PLANNER_ONLY"):
        planner()
    else:
        main()
