#!/usr/bin/python3
"""Forward pass of GPT models: ds-run against PyTorch eager, same weights,
same inputs, same thread count, in one invocation.

For each size it exports the model (cached under the build folder), loads
the ONNX weights into the torch model, and times torch's forward (no_grad)
and ds-run's (per-step times from --log-json) in two interleaved rounds of
N runs each, with a pause before each round; it prints the medians and
their ratio. It also
measures OpenBLAS sgemm's peak with numpy in the same run and prints ds-run's
GEMM throughput as a fraction of it. It prints the BLAS library torch
loaded: with netlib's reference BLAS the comparison would flatter ds.

    bench/forward_vs_torch.py [--sizes small,wide] [--threads 2] [--runs 20]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))


def blas_of_this_process():
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            if "blas" in line.lower():
                libs.add(line.split()[-1])
    return ", ".join(sorted(libs)) or "none found"


def sgemm_peak(threads, n=1024, runs=10):
    code = ("import numpy as np, time\n"
            f"a=np.random.rand({n},{n}).astype(np.float32); b=a.copy(); a@b\n"
            "best=1e9\n"
            f"for _ in range({runs}):\n"
            "  t=time.perf_counter(); a@b; best=min(best,time.perf_counter()-t)\n"
            f"print(2*{n}**3/best/1e9)\n")
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--sizes", default="small,wide")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()

    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper
    import export_gpt

    torch.set_num_threads(args.threads)
    ds_opt = os.path.join(args.build, "bin", "ds-opt")
    ds_run = os.path.join(args.build, "bin", "ds-run")
    work = os.path.join(args.build, "bench")
    os.makedirs(work, exist_ok=True)
    peak = sgemm_peak(args.threads)
    print(f"threads: {args.threads}; torch {torch.__version__}, BLAS loaded: {blas_of_this_process()}")
    print(f"OpenBLAS sgemm peak (numpy, 1024^3, same threads): {peak:.1f} GFLOP/s")
    for size in args.sizes.split(","):
        vocab, block, layers, heads, d, batch, seq = export_gpt.SIZES[size]
        path = os.path.join(work, f"gpt-{size}.onnx")
        model, idx, targets = export_gpt.build(size)
        if not os.path.exists(path):
            export_gpt.export(model, idx, targets, path)
        weights = export_gpt.load_onnx_weights(model, path)
        model.eval()
        np.savez(os.path.join(work, f"in-{size}.npz"), idx=idx.numpy(), targets=targets.numpy())

        plan = os.path.join(work, f"gpt-{size}.plan")
        log = os.path.join(work, f"log-{size}.json")
        subprocess.run([ds_opt, path, "-o", plan], check=True)
        base = [ds_run, plan, "--forward-only", "--inputs", os.path.join(work, f"in-{size}.npz"),
                "--threads", str(args.threads)]

        def torch_round():
            with torch.no_grad():
                model(idx, targets)  # warm-up
                times = []
                for _ in range(args.runs):
                    t = time.perf_counter()
                    _, loss = model(idx, targets)
                    times.append((time.perf_counter() - t) * 1e3)
            return times, loss

        def ds_round():
            out = subprocess.run(base + ["--repeat", str(args.runs + 1), "--log-json", log,
                                         "--profile"],
                                 check=True, capture_output=True, text=True).stdout
            steps = [json.loads(line)["time_ms"] for line in open(log)][1:]  # first is warm-up
            return steps, out

        # Two interleaved rounds each; a pause lets the other side's worker
        # threads (torch's OpenMP spin-wait) go idle before timing.
        torch_times, ds_times = [], []
        for _ in range(2):
            time.sleep(0.5)
            t, loss = torch_round()
            torch_times += t
            time.sleep(0.5)
            steps, out = ds_round()
            ds_times += steps
        torch_ms = statistics.median(torch_times)
        ds_ms = statistics.median(ds_times)
        ds_loss = float(re.search(r"loss ([0-9.]+)", out).group(1))
        gemm = [float(g) for g in re.findall(r"^\s+(?:matmul|gemm)\s.*?([0-9.]+) GFLOP/s", out, re.M)]
        gemm_ms = sum(float(m) for m in re.findall(r"^\s+(?:matmul|gemm)\s+([0-9.]+) ms", out, re.M))
        print(f"\nGPT '{size}': vocab {vocab}, {layers} layers, d={d}, {heads} heads, batch {batch} x {seq} tokens")
        print(f"  loss: torch {float(loss):.6f}, ds-run {ds_loss:.6f}")
        print(f"  torch eager forward (no_grad), median of {len(torch_times)}: {torch_ms:8.3f} ms")
        print(f"  ds-run forward, median of {len(ds_times)}:                 {ds_ms:8.3f} ms")
        print(f"  ratio ds-run / torch: {ds_ms / torch_ms:.2f}  ({'ds-run faster' if ds_ms < torch_ms else 'ds-run slower'})")
        if gemm:
            g = gemm[0]
            print(f"  ds-run GEMM (last run): {gemm_ms:.3f} ms, {g:.1f} GFLOP/s = {g / peak:.2f} of sgemm peak")


if __name__ == "__main__":
    main()
