#!/usr/bin/python3
"""One training step (forward, backward, SGD with momentum) of a
ResNet-18-shape CNN at 32x32 and of an LSTM language model: ds-run against
PyTorch eager, the same weights, batch and thread count, in one invocation.

The models come from test/Zoo/models.py: `resnet18` is torchvision's
ResNet-18 at its full widths (64-128-256-512; models.Classify around
torchvision.models.resnet18), `resnet18-nobn` the same convolutions with
every BatchNorm2d replaced by the identity (so that convolution speed can be
measured before BatchNormalization imports), `lstm_lm` models.LstmLM at
vocabulary 1000, d=256, 32 tokens. A model ds-opt refuses prints
`not importable yet: <ds-opt's error>` and the next one runs.

Rounds interleave: ds-run runs --steps steps, then torch the same number
with its convolutions through oneDNN (its default) and again without
(torch.backends.mkldnn.enabled = False), --rounds times, with a pause
between them so that one side's threads are idle while the other runs.
Each round's first step is a warm-up and not counted; the fastest and the
median of the rest are printed per side, with the ratio of ds to the
faster torch.

    bench/cnn_vs_torch.py [--threads 2] [--rounds 3] [--steps 6]
        [--models resnet18,resnet18-nobn,lstm_lm] [--batch 16]
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "test", "Zoo"), os.path.join(ROOT, "python"),
                os.path.join(ROOT, "bench")]
warnings.filterwarnings("ignore")
LR, MOMENTUM = 1e-2, 0.9


def make(name, batch):
    import torch
    import torch.nn as nn
    import torchvision
    import models
    torch.manual_seed(0)
    if name.startswith("resnet18"):
        net = torchvision.models.resnet18(num_classes=10)
        if name.endswith("-nobn"):
            for parent in list(net.modules()):
                for child_name, child in parent.named_children():
                    if isinstance(child, nn.BatchNorm2d):
                        setattr(parent, child_name, nn.Identity())
        return models.Classify(net), {"x": torch.randn(batch, 3, 32, 32),
                                      "y": torch.randint(0, 10, (batch,))}
    if name == "lstm_lm":
        tokens = torch.randint(0, 1000, (batch, 32))
        return models.LstmLM(vocab=1000, dim=256), {
            "tokens": tokens, "labels": torch.roll(tokens, -1, 1)}
    raise SystemExit(f"unknown model {name}")


def torch_times(model, inputs, steps, opt, clock=time.perf_counter):
    times = []
    for _ in range(steps):
        t = clock()
        opt.zero_grad()
        model(**inputs).backward()
        opt.step()
        times.append((clock() - t) * 1e3)
    return times[1:]


def ds_cpu_ms(args, plan, data, steps):
    """ds-run's CPU time per step: a run of steps + 1 less a run of 1."""
    def cpu(n):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([os.path.join(args.build, "bin", "ds-run"), plan, "--steps",
                        str(n), "--data", data, "--threads", "1"], check=True,
                       capture_output=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e3
    return (cpu(steps + 1) - cpu(1)) / steps


def ds_times(args, plan, data, log, steps):
    subprocess.run([os.path.join(args.build, "bin", "ds-run"), plan, "--steps",
                    str(steps), "--data", data, "--log-json", log, "--threads",
                    str(args.threads)], check=True, capture_output=True, text=True)
    return [json.loads(line)["time_ms"] for line in open(log)][1:]


def bench(args, name, work):
    import numpy as np
    import torch
    import ds
    model, inputs = make(name, args.batch)
    path = os.path.join(work, name + ".onnx")
    ds.export(model, inputs, path)
    plan, data = os.path.join(work, name + ".plan"), os.path.join(work, name + ".npz")
    np.savez(data, **{k: v.numpy() for k, v in inputs.items()})
    r = subprocess.run([os.path.join(args.build, "bin", "ds-opt"), path, "--optimizer=sgd",
                        f"--lr={LR}", f"--momentum={MOMENTUM}", "-o", plan],
                       capture_output=True, text=True)
    if r.returncode:
        err = next((l for l in r.stderr.splitlines() if "error" in l), r.stderr.strip())
        print(f"{name}: not importable yet: {err.strip()}")
        return
    params = sum(p.numel() for p in model.parameters())
    shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in inputs.items())
    print(f"{name}: {params} parameters, batch {shapes}")
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    # torch twice: convolutions through oneDNN (its default) and without
    # (torch.backends.mkldnn.enabled = False: im2col + BLAS); the ratio is
    # against the faster of the two.
    ds_all, torch_all = [], {True: [], False: []}
    for _ in range(args.rounds):
        time.sleep(0.5)
        ds_all += ds_times(args, plan, data, os.path.join(work, name + ".json"),
                           args.steps + 1)
        for onednn in (True, False):
            time.sleep(0.5)
            torch.backends.mkldnn.enabled = onednn
            torch_all[onednn] += torch_times(model, inputs, args.steps + 1, opt)
    torch.backends.mkldnn.enabled = True
    rows = [("ds-run", ds_all), ("torch eager, oneDNN", torch_all[True]),
            ("torch eager, no oneDNN", torch_all[False])]
    print(f"  {'':24s} {'fastest':>10s} {'median':>10s}   (ms per step, {len(ds_all)} steps each)")
    for label, times in rows:
        print(f"  {label:24s} {min(times):10.2f} {statistics.median(times):10.2f}")
    best_min = min(min(t) for t in torch_all.values())
    best_med = min(statistics.median(t) for t in torch_all.values())
    print(f"  {'ratio ds/torch (best)':24s} {min(ds_all) / best_min:10.2f} "
          f"{statistics.median(ds_all) / best_med:10.2f}")
    if args.threads == 1:
        # One thread: CPU time does not count the time other processes
        # hold the core, so it compares the two sides on a busy machine.
        ds_cpu, torch_cpu = [], []
        for _ in range(args.rounds):
            ds_cpu.append(ds_cpu_ms(args, plan, data, args.steps))
            torch_cpu += torch_times(model, inputs, args.steps + 1, opt,
                                     time.process_time)
        print(f"  CPU ms per step: ds-run {min(ds_cpu):.2f} (mean over each run of "
              f"{args.steps}: fastest run), torch oneDNN {min(torch_cpu):.2f} "
              f"(fastest step); ratio {min(ds_cpu) / min(torch_cpu):.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--models", default="resnet18,resnet18-nobn,lstm_lm")
    args = ap.parse_args()
    import torch
    from forward_vs_torch import blas_of_this_process
    torch.set_num_threads(args.threads)
    blas = re.search(r"BLAS_INFO=([^,]*)", torch.__config__.show())
    onednn = re.search(r"MKL-DNN v[0-9.]+", torch.__config__.show())
    print(f"threads: {args.threads} (ds-run --threads {args.threads}, "
          f"torch.set_num_threads({args.threads}))")
    print(f"torch {torch.__version__}: BLAS_INFO={blas.group(1) if blas else '?'}"
          f"{', ' + onednn.group(0) + ' (convolutions)' if onednn else ''}; "
          f"BLAS loaded: {blas_of_this_process()}")
    print("load average before: %.2f %.2f %.2f (other processes share the cores: "
          "compare the fastest steps)" % os.getloadavg())
    work = os.path.join(args.build, "bench", "cnn")
    os.makedirs(work, exist_ok=True)
    for name in args.models.split(","):
        bench(args, name, work)


if __name__ == "__main__":
    main()
