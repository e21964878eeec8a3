#!/usr/bin/python3
"""One training step (forward, backward, Adam) of ds-run against PyTorch
eager, side by side in one invocation: the same ONNX export, weights, batch
and thread count.

Models: `gpt-small` (GPT decoder, d=128, 4 layers, 4 heads, batch 4 x 64),
`gpt-train` (d=256, 4 layers, 8 heads, batch 4 x 128) and `bert` (a
BERT-style encoder with a padding mask, bench/bert_encoder.py: d=256, 4
layers, batch 4 x 128).

Torch runs at its best thread set-up: torch.set_num_threads(N) with
OpenBLAS at 1 thread and, when N > 1, at N threads (OpenBLAS's threads on
top of torch's intra-op threads oversubscribe the cores); the faster of the
two counts. A torch that loaded no OpenBLAS or MKL (the reference BLAS) is
refused. Rounds interleave ds-run and each torch set-up, with a pause
between them; each round's first step is a warm-up. Printed: fastest and
median step per side, ds/torch, ds's GFLOP/s (6 * params * tokens +
12 * layers * d * T^2 per sequence) against OpenBLAS sgemm's peak measured
in the same run with the same threads, and ds-run's top kernels by time
(ds-run --profile), and the floor: the step's unavoidable GEMM work at the
sgemm peak over torch's fastest step, the lowest ratio any implementation
can reach with this core and BLAS. At 1 thread each side's CPU time per step is printed
too: it leaves out the time other processes hold the core, so it compares
the two on a busy machine.

    bench/step_vs_torch.sh [--threads 1,2] [--rounds 3] [--steps 6]
        [--models gpt-small,gpt-train,bert] [--top 8]
"""
import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "examples", "gpt"), os.path.join(ROOT, "python"),
                os.path.join(ROOT, "bench")]
warnings.filterwarnings("ignore")
LR = 1e-3


def loaded_blas():
    """The BLAS libraries mapped into this process, and a function that sets
    their thread count (None when none of them is OpenBLAS or MKL)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "blas" in path.lower() or "mkl" in path.lower():
                libs.add(path)
    for path in sorted(libs):
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_set_num_threads"):
            # The kernels OpenBLAS picked: OPENBLAS_CORETYPE may force older
            # ones (Haswell's AVX2 where the core has AVX-512); ds-run loads
            # the same library with the same environment.
            lib.openblas_get_corename.restype = ctypes.c_char_p
            core = lib.openblas_get_corename().decode()
            forced = os.environ.get("OPENBLAS_CORETYPE")
            kind = f"OpenBLAS, {core} kernels" + (f", OPENBLAS_CORETYPE={forced}" if forced else "")
            return sorted(libs), kind, lib.openblas_set_num_threads
        if hasattr(lib, "MKL_Set_Num_Threads"):
            return sorted(libs), "MKL", lib.MKL_Set_Num_Threads
    return sorted(libs), None, None


def gpt(size, work):
    import numpy as np
    import export_gpt
    vocab, block, layers, heads, d, batch, seq = export_gpt.SIZES[size]
    path = os.path.join(work, f"gpt-{size}.onnx")
    model, idx, targets = export_gpt.build(size)
    if not os.path.exists(path):
        export_gpt.export(model, idx, targets, path)
    export_gpt.load_onnx_weights(model, path)
    data = os.path.join(work, f"gpt-{size}.npz")
    np.savez(data, idx=idx.numpy(), targets=targets.numpy())
    desc = f"GPT d={d}, {layers} layers, {heads} heads, batch {batch} x {seq}"
    return model, lambda: model(idx, targets)[1], path, data, (layers, d, batch, seq), desc


def bert(work):
    import numpy as np
    import ds
    import bert_encoder
    vocab, layers, heads, d, batch, seq = bert_encoder.SIZE
    model, inputs = bert_encoder.build()
    path = os.path.join(work, "bert.onnx")
    ds.export(model, inputs, path)
    data = os.path.join(work, "bert.npz")
    np.savez(data, **{k: v.numpy() for k, v in inputs.items()})
    pad = int((inputs["keep"] == 0).sum())
    desc = (f"BERT-style encoder d={d}, {layers} layers, {heads} heads, batch {batch} x {seq}, "
            f"padding mask ({pad} of {batch * seq} positions padded)")
    return model, lambda: model(**inputs), path, data, (layers, d, batch, seq), desc


def torch_times(model, loss_fn, opt, steps, losses, clock=time.perf_counter):
    times = []
    for _ in range(steps):
        t = clock()
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
        times.append((clock() - t) * 1e3)
        losses.append(float(loss))
    return times[1:]


def ds_run(args, plan, data, threads, steps, extra=()):
    log = plan + ".json"
    r = subprocess.run([os.path.join(args.build, "bin", "ds-run"), plan, "--steps", str(steps),
                        "--data", data, "--log-json", log, "--threads", str(threads), *extra],
                       check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in open(log)]
    return [r["time_ms"] for r in rows][1:], r.stdout, rows[0]["loss"]


def ds_cpu_ms(args, plan, data, steps):
    """ds-run's CPU time per step at 1 thread: a run of steps + 1 less a run
    of 1 (start-up, weights and the first step cancel)."""
    def cpu(n):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([os.path.join(args.build, "bin", "ds-run"), plan, "--steps", str(n),
                        "--data", data, "--threads", "1"], check=True, capture_output=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e3
    return (cpu(steps + 1) - cpu(1)) / steps


def floor_ratio(model, shape, peak, torch_ms):
    """The lowest ds/torch ratio any implementation can reach on this core
    and BLAS: the step's unavoidable GEMM work (every nn.Linear weight and the
    tied head, 6 FLOPs per weight and token for the forward product and both
    gradients, plus half of the attention products, as if a causal mask let
    a kernel skip the other half) at the sgemm peak, against torch's fastest
    step. Elementwise work, reductions and the optimizer count as free."""
    import torch
    layers, d, batch, seq = shape
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    if hasattr(model, "tok"):  # the BERT encoder's head is `x @ tok.weight.t()`
        weights += model.tok.weight.numel()
    gemm = 6 * weights * batch * seq + 6 * layers * d * seq * seq * batch
    ms = gemm / peak / 1e6
    print(f"  floor: GEMM work {gemm / 1e9:.2f} GFLOP = {ms:.2f} ms at sgemm peak = "
          f"{ms / torch_ms:.2f} of torch's fastest step (no step on this core and BLAS "
          f"has a lower ratio)")
    return ms / torch_ms


def bench(args, name, work, threads, peak, set_blas_threads):
    import torch
    model, loss_fn, path, data, (layers, d, batch, seq), desc = (
        bert(work) if name == "bert" else gpt({"gpt-small": "small", "gpt-train": "train"}[name], work))
    plan = os.path.join(work, name + ".plan")
    subprocess.run([os.path.join(args.build, "bin", "ds-opt"), path, "--optimizer=adam",
                    f"--lr={LR}", *args.ds_opt_flag, "-o", plan], check=True)
    params = sum(p.numel() for p in model.parameters())
    flops = 6 * params * batch * seq + 12 * layers * d * seq * seq * batch
    print(f"{name}: {desc}; {params} parameters, {flops / 1e9:.2f} GFLOP per step")
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    blas_counts = [1] if threads == 1 else [1, threads]
    ds_all, torch_all, torch_losses = [], {k: [] for k in blas_counts}, []
    for _ in range(args.rounds):
        time.sleep(0.5)
        times, _, ds_loss = ds_run(args, plan, data, threads, args.steps + 1)
        ds_all += times
        for k in blas_counts:
            time.sleep(0.5)
            set_blas_threads(k)
            torch_all[k] += torch_times(model, loss_fn, opt, args.steps + 1, torch_losses)
    # Both sides start from the same weights: their first losses agree.
    print(f"  first-step loss: ds-run {ds_loss:.6f}, torch {torch_losses[0]:.6f}")
    set_blas_threads(1)
    rows = [("ds-run", ds_all)] + [(f"torch, OpenBLAS {k} thr", torch_all[k]) for k in blas_counts]
    print(f"  {'':24s} {'fastest':>9s} {'median':>9s}   (ms per step, {len(ds_all)} steps each)")
    for label, t in rows:
        print(f"  {label:24s} {min(t):9.2f} {statistics.median(t):9.2f}")
    best_min = min(min(t) for t in torch_all.values())
    best_med = min(statistics.median(t) for t in torch_all.values())
    r_min, r_med = min(ds_all) / best_min, statistics.median(ds_all) / best_med
    print(f"  {'ratio ds/torch (best)':24s} {r_min:9.2f} {r_med:9.2f}")
    if threads == 1:
        # One thread: CPU time leaves out the time other processes hold the
        # core, so it compares the two sides on a busy machine.
        ds_cpu, torch_cpu = [], []
        for _ in range(args.rounds):
            ds_cpu.append(ds_cpu_ms(args, plan, data, args.steps))
            torch_cpu += torch_times(model, loss_fn, opt, args.steps + 1, [],
                                     time.process_time)
        print(f"  CPU ms per step: ds-run {min(ds_cpu):.2f} (fastest run's mean), torch "
              f"{min(torch_cpu):.2f} (fastest step), {statistics.median(torch_cpu):.2f} "
              f"(median); ratio {min(ds_cpu) / min(torch_cpu):.2f}")
    gf = flops / min(ds_all) / 1e6
    print(f"  ds-run fastest step: {gf:.1f} GFLOP/s = {gf / peak:.2f} of sgemm peak")
    floor = floor_ratio(model, (layers, d, batch, seq), peak, best_min)
    out = ds_run(args, plan, data, threads, 3, ["--profile"])[1]
    lines = out.splitlines()
    if "profile of the last run:" in lines:
        at = lines.index("profile of the last run:")
        print(f"  ds-run top kernels (--profile, last of 3 steps):")
        for line in lines[at + 1:at + 1 + args.top]:
            print("    " + line.strip())
    return name, threads, r_min, r_med, floor


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--models", default="gpt-small,gpt-train,bert")
    ap.add_argument("--ds-opt-flag", action="append", default=[],
                    help="an extra ds-opt flag for the plans (repeatable), "
                         "e.g. --ds-opt-flag=--fuse-elementwise=false")
    args = ap.parse_args()
    import torch
    from forward_vs_torch import sgemm_peak
    libs, kind, set_blas_threads = loaded_blas()
    print(f"torch {torch.__version__}; BLAS loaded: {', '.join(libs) or 'none'} ({kind or 'unknown'})")
    if kind is None:
        sys.exit("step_vs_torch: torch loaded no OpenBLAS or MKL (a reference BLAS?): "
                 "refusing to compare against it")
    print("load average before: %.2f %.2f %.2f (other processes share the cores: "
          "compare the fastest steps)" % os.getloadavg())
    work = os.path.join(args.build, "bench", "step")
    os.makedirs(work, exist_ok=True)
    summary = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        peak = sgemm_peak(threads)
        print(f"== threads {threads}: ds-run --threads {threads}, torch.set_num_threads({threads}); "
              f"OpenBLAS sgemm peak (1024^3, {threads} thr): {peak:.1f} GFLOP/s")
        for name in args.models.split(","):
            summary.append(bench(args, name, work, threads, peak, set_blas_threads))
    print("summary, ds/torch (fastest, median):")
    for name, threads, r_min, r_med, floor in summary:
        print(f"  {name:10s} {threads} thr  {r_min:.2f}  {r_med:.2f}   (floor {floor:.2f})")


if __name__ == "__main__":
    main()
