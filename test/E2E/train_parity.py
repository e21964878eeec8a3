#!/usr/bin/python3
"""Training parity: ds (ds-opt --optimizer + ds-run --steps) against
torch.optim on the same weights and batch, step by step.

Tolerances: each step's loss within 1e-5 relative; the final weights
within 1e-4 absolute (f32 on both sides; GEMM sums in another order).

Elements whose gradient is mathematically zero (e.g. the key bias of
attention: softmax ignores a constant shift of a query's scores) hold only
rounding noise (~1e-12) in both implementations, which Adam normalizes into
lr-sized steps of arbitrary sign; no two implementations agree on those, so
the final-weight comparison skips elements whose first gradient is below
1e-6 of their parameter's largest, and says how many it skipped.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grad_parity as gp  # noqa: E402  (the models and their export)

LOSS_TOL, WEIGHT_TOL = 1e-5, 1e-4


class Lamb(torch.optim.Optimizer):
    """The reference Lamb (DeepSpeed FusedLamb's rule): Adam's bias-corrected
    direction plus decoupled weight decay, times the trust ratio
    ||p|| / ||u|| clamped to [min_coeff, max_coeff] (1 if a norm is 0).
    With lamb=False: Adam (L2 decay), for the case torch's Adam lacks:
    bias_correction=False (DeepSpeed's option: moments not divided)."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 bias_correction=True, max_coeff=10.0, min_coeff=0.01, lamb=True):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.bc, self.max_coeff, self.min_coeff, self.lamb = \
            bias_correction, max_coeff, min_coeff, lamb

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                st = self.state[p]
                if not st:
                    st["t"], st["m"], st["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                st["t"] += 1
                t, m, v, g = st["t"], st["m"], st["v"], p.grad
                if not self.lamb:
                    g = g + group["weight_decay"] * p
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                c1, c2 = (1 - b1 ** t, 1 - b2 ** t) if self.bc else (1.0, 1.0)
                u = (m / c1) / (v.sqrt() / math.sqrt(c2) + group["eps"])
                if not self.lamb:
                    p.add_(u, alpha=-group["lr"])
                    continue
                u = u + group["weight_decay"] * p
                pn, un = float(p.norm()), float(u.norm())
                trust = (min(max(pn / un, self.min_coeff), self.max_coeff)
                         if pn > 0 and un > 0 else 1.0)
                p.add_(u, alpha=-group["lr"] * trust)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", choices=["gpt", "branches", "classifier"], required=True)
    ap.add_argument("--optimizer", choices=["adam", "adamw", "sgd", "lamb"], required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--schedule", default="constant")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--total", type=int, default=0)
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--no-bias-correction", action="store_true",
                    help="adam/lamb without bias correction (DeepSpeed's "
                         "bias_correction: false)")
    ap.add_argument("--max-coeff", type=float, default=10.0,
                    help="lamb's trust-ratio upper bound")
    ap.add_argument("--accum", type=int, default=1,
                    help="micro-batches per step (MLP models): torch runs "
                         "(loss / K).backward() K times, then steps")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)

    model, path, feeds, forward = gp.setup(args.model, args.work)
    micro = [forward]
    if args.accum > 1:
        if args.model == "gpt":
            sys.exit("--accum is for the MLP models")
        rng = np.random.RandomState(11)
        batches = [feeds] + [{"x": rng.randn(*feeds["x"].shape).astype(np.float32),
                              "y": rng.randint(0, 5, size=feeds["y"].shape).astype(np.int64)}
                             for _ in range(args.accum - 1)]
        micro = [(lambda b=b: model(torch.from_numpy(b["x"]), torch.from_numpy(b["y"])))
                 for b in batches]
        feeds = {k: np.concatenate([b[k] for b in batches]) for k in ("x", "y")}
    lr, wd, momentum = 1e-2, 0.01, 0.9
    params = [p for p in model.parameters()]
    bc = not args.no_bias_correction
    if args.optimizer == "adam" and not bc:
        opt = Lamb(params, lr=lr, bias_correction=False, lamb=False)
        flags = [f"--lr={lr}", "--bias-correction=false"]
    elif args.optimizer == "adam":
        opt = torch.optim.Adam(params, lr=lr)
        flags = [f"--lr={lr}"]
    elif args.optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=wd)
        flags = [f"--lr={lr}", f"--weight-decay={wd}"]
    elif args.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=True)
        flags = [f"--lr={lr}", f"--momentum={momentum}", "--nesterov"]
    else:
        opt = Lamb(params, lr=lr, weight_decay=wd, bias_correction=bc,
                   max_coeff=args.max_coeff)
        flags = [f"--lr={lr}", f"--weight-decay={wd}",
                 f"--bias-correction={'true' if bc else 'false'}",
                 f"--lamb-max-coeff={args.max_coeff}"]
    if args.schedule != "constant":
        flags += [f"--lr-schedule={args.schedule}", f"--warmup-steps={args.warmup}",
                  f"--total-steps={args.total}"]
    if args.clip:
        flags.append(f"--grad-clip={args.clip}")
    if args.accum > 1:
        flags.append(f"--grad-accum={args.accum}")

    def factor(k):  # torch's LambdaLR factor for optimizer step k (0-based)
        t = k + 1
        if args.schedule == "constant":
            return 1.0
        if args.warmup and t <= args.warmup:
            return t / args.warmup
        if args.schedule == "warmup":
            return 1.0
        p = min(max((t - args.warmup) / max(args.total - args.warmup, 1), 0.0), 1.0)
        if args.schedule == "warmup-cosine":
            return 0.5 * (1 + math.cos(math.pi * p))
        return 1.0 - p
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    torch_losses = []
    norms = []  # torch's global gradient norms, before clipping
    masks = {}
    for step in range(args.steps):
        opt.zero_grad()
        total = 0.0
        for f in micro:
            loss = f()
            (loss / len(micro)).backward()
            total += float(loss)
        loss = torch.tensor(total / len(micro))
        if step == 0:
            for name, p in model.named_parameters():
                g = np.abs(p.grad.numpy())
                masks[name] = g > 1e-6 * g.max() if g.max() > 0 else np.ones_like(g, bool)
        if args.clip:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, args.clip)))
        opt.step()
        sched.step()
        torch_losses.append(float(loss))

    data = os.path.join(args.work, "data.npz")
    np.savez(data, **feeds)
    plan = os.path.join(args.work, "train.plan")
    log = os.path.join(args.work, "log.json")
    weights = os.path.join(args.work, "weights.npz")
    subprocess.run([args.ds_opt, path, f"--optimizer={args.optimizer}", *flags,
                    "-o", plan], check=True)
    subprocess.run([args.ds_run, plan, "--steps", str(args.steps), "--data", data,
                    "--log-json", log, "--save-weights", weights, "--threads", "2"],
                   check=True, capture_output=True)
    ds_losses = [json.loads(line)["loss"] for line in open(log)]
    ok = len(ds_losses) == args.steps
    worst_loss = 0.0
    for s, (d, t) in enumerate(zip(ds_losses, torch_losses), 1):
        rel = abs(d - t) / abs(t)
        worst_loss = max(worst_loss, rel)
        if rel > LOSS_TOL:
            print(f"FAIL step {s}: loss ds {d:.7f} torch {t:.7f}")
            ok = False
    got = np.load(weights)
    worst_w, skipped = 0.0, 0
    state = dict(model.named_parameters())
    for name, p in state.items():
        key = "wte.weight" if name == "lm_head.weight" else name
        mask = masks[name]
        skipped += int(mask.size - mask.sum())
        diff = np.abs(got[key] - p.detach().numpy())[mask]
        err = float(diff.max()) if diff.size else 0.0
        worst_w = max(worst_w, err)
        if err > WEIGHT_TOL:
            print(f"FAIL final {name}: max abs difference {err:.2e}")
            ok = False
    print(f"{args.model}/{args.optimizer}: losses " +
          " ".join(f"{x:.5f}" for x in ds_losses))
    print(f"{args.model}/{args.optimizer} ({args.schedule}, clip {args.clip:g}"
          + (f", accum {args.accum}" if args.accum > 1 else "") + f"): {args.steps} steps, worst loss rel error "
          f"{worst_loss:.1e} (tol {LOSS_TOL:g}), worst final weight abs error "
          f"{worst_w:.1e} (tol {WEIGHT_TOL:g}; {skipped} zero-gradient elements skipped)")
    if args.clip:
        # Whether clipping was active: the steps whose norm exceeded it.
        print(f"clipped {sum(n > args.clip for n in norms)} of {len(norms)} steps "
              f"(torch's norms {' '.join(f'{n:.3g}' for n in norms)})")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
