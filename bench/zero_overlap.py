#!/usr/bin/python3
"""ZeRO on 2 MPI ranks: step time with communication overlapping
computation (ds-opt's default) against collectives run in place
(--overlap-comm=false), same model, data and plan otherwise, interleaved
rounds in one invocation. Prints the median step times and their ratio,
and the report's overlap line of each plan.

    bench/zero_overlap.py [--size small] [--stages 2,3] [--rounds 3] [--steps 20]

On CPU the overlap is limited: MPI progresses non-blocking collectives
only when ds-run tests them between kernels, and the ranks share cores.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = {"tiny": 32, "small": 64, "wide": 128, "train": 128}
VOCAB = {"tiny": 128, "small": 512, "wide": 1024, "train": 1024}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--size", default="small", choices=sorted(SEQ))
    ap.add_argument("--stages", default="2,3")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--inflight", type=int, default=2,
                    help="--max-inflight-collectives of the overlapped plan")
    ap.add_argument("--bucket", type=int, default=100000,
                    help="reduce and prefetch bucket size (elements)")
    args = ap.parse_args()
    import numpy as np
    work = os.path.join(args.build, "bench-zero")
    os.makedirs(work, exist_ok=True)
    onnx_path = os.path.join(work, f"{args.size}.onnx")
    if not os.path.exists(onnx_path):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples", "gpt", "export_gpt.py"),
                        "--size", args.size, "--dynamic", "-o", onnx_path],
                       check=True, capture_output=True)
    seq = SEQ[args.size]
    rng = np.random.RandomState(0)
    data = os.path.join(work, "data.npz")
    np.savez(data, idx=rng.randint(0, VOCAB[args.size], (8, seq)),
             targets=rng.randint(0, VOCAB[args.size], (8, seq)))
    ds_opt = os.path.join(args.build, "bin", "ds-opt")
    ds_run = os.path.join(args.build, "bin", "ds-run")
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
    for stage in [int(s) for s in args.stages.split(",")]:
        plans = {}
        for overlap in ("true", "false"):
            plan = os.path.join(work, f"z{stage}-{overlap}.plan")
            rep = subprocess.run(
                [ds_opt, onnx_path, f"--input-shape=idx:4x{seq}", f"--input-shape=targets:4x{seq}",
                 "--optimizer=adam", "--world-size=2", f"--zero={stage}",
                 f"--reduce-bucket-size={args.bucket}", f"--prefetch-bucket-size={args.bucket}",
                 f"--overlap-comm={overlap}", f"--max-inflight-collectives={args.inflight}",
                 "--report", "-o", plan],
                check=True, capture_output=True, text=True).stdout
            plans[overlap] = plan
            line = [l for l in rep.splitlines() if "overlap:" in l][0].strip()
            print(f"ZeRO-{stage} overlap-comm={overlap}: {line}")
        times = {"true": [], "false": []}
        for _ in range(args.rounds):
            for overlap in ("true", "false"):
                log = os.path.join(work, f"z{stage}-{overlap}.json")
                subprocess.run(mpirun + [ds_run, plans[overlap], "--steps", str(args.steps),
                                         "--data", data, "--threads", "1", "--log-json", log],
                               check=True, capture_output=True)
                steps = [json.loads(l)["time_ms"] for l in open(log)][1:]
                times[overlap].append(statistics.median(steps))
        on, off = statistics.median(times["true"]), statistics.median(times["false"])
        print(f"ZeRO-{stage}, {args.size}, 2 ranks: overlapped {on:.2f} ms/step, in place "
              f"{off:.2f} ms/step, ratio {on / off:.3f}")


if __name__ == "__main__":
    sys.exit(main())
