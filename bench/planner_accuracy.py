#!/usr/bin/python3
"""The driver of bench/planner_accuracy.sh: for each of several rounds,
calibrates this machine (one rank with both threads; two ranks under
mpirun with one thread each), then compiles each configuration with
ds-opt --cluster (the description for its rank count) and runs it with
ds-run, comparing the predicted step with the median measured step after
warm-up. A configuration's figures are the medians over the rounds, so a
change of the machine's load during the run moves the calibration and
the measurements together.

Every configuration of a model trains the same global batch (GPT: 8
sequences of 64 tokens; BERT: 8 rows of 64), so their step times compare:
the predicted fastest should be the measured fastest.

The per-kernel figures (--calibrate-kernels-of) come from GPT plans only
(two 1-rank plans, two 2-rank plans): for the BERT rows they are a held-out
model's.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

GPT_INPUTS = ["idx", "targets"]
BERT_INPUTS = ["ids", "mask", "targets"]

# name, model, ranks, micro-batch rows, ds-opt flags
CONFIGS = [
    ("gpt 1r mb8", "gpt", 1, 8, ""),
    ("gpt 1r mb4 x2acc", "gpt", 1, 4, "--grad-accum=2"),
    ("gpt 1r mb2 x4acc", "gpt", 1, 2, "--grad-accum=4"),
    ("gpt 1r mb8 rc-full", "gpt", 1, 8, "--recompute=full"),
    ("gpt 2r z0 mb4", "gpt", 2, 4, "--zero=0"),
    ("gpt 2r z1 mb4", "gpt", 2, 4, "--zero=1"),
    ("gpt 2r z2 mb4", "gpt", 2, 4, "--zero=2"),
    ("gpt 2r z3 mb4", "gpt", 2, 4, "--zero=3"),
    ("gpt 2r z3 mb4 rc-full", "gpt", 2, 4, "--zero=3 --recompute=full"),
    ("gpt 2r z0 mb2 x2acc", "gpt", 2, 2, "--zero=0 --grad-accum=2"),
    ("gpt 2r tp2 mb8", "gpt", 2, 8, "--tensor-parallel=2"),
    ("gpt 2r pp2 1f1b 4x2", "gpt", 2, 2, "--pipeline-parallel=2 --micro-batches=4"),
    ("bert 1r mb8", "bert", 1, 8, ""),
    ("bert 1r mb4 x2acc", "bert", 1, 4, "--grad-accum=2"),
    ("bert 1r mb8 rc-layer", "bert", 1, 8, "--recompute=every-layer"),
    ("bert 2r z0 mb4", "bert", 2, 4, "--zero=0"),
    ("bert 2r z2 mb4", "bert", 2, 4, "--zero=2"),
    ("bert 2r z3 mb4 rc-full", "bert", 2, 4, "--zero=3 --recompute=full"),
    ("bert 2r tp2 mb8", "bert", 2, 8, "--tensor-parallel=2"),
    ("bert 2r pp2 1f1b 4x2", "bert", 2, 2, "--pipeline-parallel=2 --micro-batches=4"),
]
# The plans whose kernels the calibration times at their shapes, by ranks.
KIND_SAMPLES = {1: ["gpt 1r mb8", "gpt 1r mb2 x4acc"],
                2: ["gpt 2r z3 mb4", "gpt 2r tp2 mb8"]}
MPIRUN = "mpirun --oversubscribe --bind-to none"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"accuracy: failed ({r.returncode}): {cmd}\n{r.stderr[-2000:]}")
    return r.stdout


def find_predicted(report):
    if isinstance(report, dict):
        if "predicted" in report and "step_time_s" in report["predicted"]:
            return report["predicted"]["step_time_s"]
        for v in report.values():
            r = find_predicted(v)
            if r is not None:
                return r
    return None


def ranks_of(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks_of(a), ranks_of(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return num / den if den else float("nan")


def percentile(xs, q):
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Bench:
    def __init__(self, args):
        self.a = args
        self.bin = os.path.join(args.build, "bin")
        self.w = args.work
        self.configs = [c for c in CONFIGS if not args.only or c[1] == args.only]

    def compile(self, i, cluster=None):
        name, model, ranks, mb, flags = CONFIGS[i]
        shape = " ".join(f"--input-shape={n}:{mb}x64"
                         for n in (GPT_INPUTS if model == "gpt" else BERT_INPUTS))
        extra = f"--cluster={cluster} --report=json" if cluster else ""
        out = run(f"{self.bin}/ds-opt {self.w}/{model}.onnx --optimizer=adam {shape} "
                  f"--world-size={ranks} {flags} {extra} -o {self.plan(i)}")
        if not cluster:
            return None
        p = find_predicted(json.loads(out))
        if p is None:
            sys.exit(f"accuracy: no predicted.step_time_s for {name}")
        return p

    def plan(self, i):
        return os.path.join(self.w, f"c{i}.plan")

    def calibrate(self, r):
        files = {}
        for ranks in (1, 2):
            out = os.path.join(self.w, f"machine-{ranks}-r{r}.json")
            kinds = ""
            if self.a.kinds:
                idx = [i for i, c in enumerate(CONFIGS) if c[0] in KIND_SAMPLES[ranks]]
                kinds = "--calibrate-kernels-of=" + ",".join(
                    os.path.join(self.w, f"sample{i}.plan") for i in idx)
            launch = f"{MPIRUN} -np {ranks} " if ranks > 1 else ""
            t0 = time.time()
            run(f"{launch}{self.bin}/ds-run --calibrate --threads {2 // ranks} "
                f"{kinds} -o {out}")
            log(f"accuracy: round {r + 1}: calibrated {ranks} rank(s) in "
                f"{time.time() - t0:.0f} s")
            files[ranks] = out
        return files

    def measure(self, i):
        name, model, ranks, mb, flags = CONFIGS[i]
        data = (f"--tokens {self.w}/gpt.tokens" if model == "gpt"
                else f"--data {self.w}/bert.npz")
        logf = os.path.join(self.w, f"c{i}.log.json")
        launch = f"{MPIRUN} -np {ranks} " if ranks > 1 else ""
        run(f"{launch}{self.bin}/ds-run {self.plan(i)} --steps {self.a.steps} "
            f"--threads {2 // ranks} {data} --no-progress-bar --log-json {logf}")
        times = [json.loads(l)["time_ms"] for l in open(logf) if l.strip()]
        return statistics.median(times[self.a.warmup:]) / 1e3

    def go(self):
        # The kernel samples' plans (without a cluster: the plan is the same).
        for ranks, names in KIND_SAMPLES.items():
            for i, c in enumerate(CONFIGS):
                if c[0] in names:
                    self.compile(i)
                    os.replace(self.plan(i), os.path.join(self.w, f"sample{i}.plan"))
        idx = [CONFIGS.index(c) for c in self.configs]
        pred = {i: [] for i in idx}
        meas = {i: [] for i in idx}
        for r in range(self.a.rounds):
            files = self.calibrate(r)
            for i in idx:
                t0 = time.time()
                pred[i].append(self.compile(i, files[CONFIGS[i][2]]))
                meas[i].append(self.measure(i))
                log(f"accuracy: round {r + 1}/{self.a.rounds} {CONFIGS[i][0]:24s} "
                    f"predicted {pred[i][-1] * 1e3:8.2f} ms, measured "
                    f"{meas[i][-1] * 1e3:8.2f} ms ({time.time() - t0:.0f} s)")
        self.table(idx, pred, meas)

    def table(self, idx, pred, meas):
        print(f"{'configuration':26s} {'predicted ms':>12s} {'measured ms':>12s} "
              f"{'rounds':>7s} {'error':>7s}")
        rows = []
        for i in idx:
            p, m = statistics.median(pred[i]), statistics.median(meas[i])
            spread = max(meas[i]) / min(meas[i]) - 1
            rows.append((CONFIGS[i][0], CONFIGS[i][1], p, m, p / m - 1, spread))
            print(f"{CONFIGS[i][0]:26s} {p * 1e3:12.2f} {m * 1e3:12.2f} "
                  f"{spread * 100:6.0f}% {(p / m - 1) * 100:+6.1f}%")
        print("(rounds: the measured step's spread over the rounds, max/min - 1)")
        summary(rows, "all")
        for model in sorted({r[1] for r in rows}):
            summary([r for r in rows if r[1] == model], model)


def summary(rows, label):
    errs = [abs(r[4]) for r in rows]
    pred = [r[2] for r in rows]
    meas = [r[3] for r in rows]
    bp = min(rows, key=lambda r: r[2])
    bm = min(rows, key=lambda r: r[3])
    line = (f"{label}: {len(rows)} configurations, median |error| "
            f"{statistics.median(errs) * 100:.1f}%, p90 {percentile(errs, 0.9) * 100:.1f}%, "
            f"Spearman {spearman(pred, meas):.3f}, predicted/measured "
            f"{statistics.median(p / m for p, m in zip(pred, meas)):.2f} (median)")
    if label != "all":
        line += (f"; predicted best '{bp[0]}' measured {bp[3] * 1e3:.2f} ms, measured "
                 f"best '{bm[0]}' {bm[3] * 1e3:.2f} ms: "
                 f"{'the same' if bp is bm else 'not the same'} "
                 f"({(bp[3] / bm[3] - 1) * 100:+.1f}%)")
    print(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", type=int, default=1,
                    help="0: calibrate without per-kernel figures (families only)")
    ap.add_argument("--only", default=None, help="gpt or bert")
    Bench(ap.parse_args()).go()


if __name__ == "__main__":
    main()
