#!/usr/bin/python3
"""fp16 training with DeepSpeed's dynamic loss scaler.

Runs the GPT example in fp16 with overflows injected at scripted steps
(ds-run --inject-overflow) and compares, step by step, the scale each step
used, the skipped count and the hysteresis counter ds-run logs with a
reference of DeepSpeed's DynamicLossScaler.update_scale written here.
"""
import argparse
import json
import subprocess
import sys


def reference(steps, overflows, power, window, hysteresis, consecutive, min_scale):
    """DeepSpeed's rules (deepspeed/runtime/fp16/loss_scaler.py)."""
    scale, cur_h, cur_iter, last_overflow, skipped = 2.0 ** power, hysteresis, 0, -1, 0
    out = []
    for step in range(1, steps + 1):
        used = scale
        overflow = step in overflows
        if overflow:
            skipped += 1
            if hysteresis == 1 or cur_h == 1:
                scale = max(scale / 2, min_scale)
            else:
                cur_h -= 1
            last_overflow = cur_iter
        else:
            if consecutive:
                cur_h = hysteresis
            if (cur_iter - last_overflow) % window == 0:
                if not consecutive:
                    cur_h = hysteresis
                scale *= 2
        cur_iter += 1
        out.append((used, overflow, skipped, cur_h, scale))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--overflows", default="2,3,4,8,9")
    ap.add_argument("--power", type=int, default=8)
    ap.add_argument("--window", type=int, default=3)
    ap.add_argument("--hysteresis", type=int, default=2)
    ap.add_argument("--consecutive", action="store_true")
    ap.add_argument("--min-scale", type=float, default=64.0)
    args = ap.parse_args()
    plan = f"{args.work}/scaler.plan"
    log = f"{args.work}/scaler.json"
    subprocess.run([args.ds_opt, args.onnx, "--optimizer=adamw", "--lr=3e-3", "--precision=fp16",
                    f"--initial-scale-power={args.power}", f"--loss-scale-window={args.window}",
                    f"--hysteresis={args.hysteresis}", f"--min-loss-scale={args.min_scale}"]
                   + (["--consecutive-hysteresis"] if args.consecutive else []) + ["-o", plan],
                   check=True)
    subprocess.run([args.ds_run, plan, "--steps", str(args.steps), "--data", args.data,
                    "--inject-overflow", args.overflows, "--log-json", log],
                   check=True, capture_output=True)
    got = [json.loads(l) for l in open(log)]
    got = [(g["loss_scale"], g["overflow"], g["skipped"], g["hysteresis"], g["next_loss_scale"])
           for g in got]
    want = reference(args.steps, {int(x) for x in args.overflows.split(",")}, args.power,
                     args.window, args.hysteresis, args.consecutive, args.min_scale)
    for step, (g, w) in enumerate(zip(got, want), 1):
        print(f"step {step}: ds-run scale {g[0]:g} overflow {g[1]} skipped {g[2]} hysteresis "
              f"{g[3]} next {g[4]:g} | DeepSpeed {w[0]:g} {w[1]} {w[2]} {w[3]} {w[4]:g}")
    ok = got == want
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
