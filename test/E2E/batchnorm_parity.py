#!/usr/bin/python3
"""BatchNormalization in training mode end to end, against torch.

    batchnorm_parity.py --ds-opt ds-opt --ds-run ds-run --work DIR
        --model cnn|mlp --optimizer adam|sgd [--resume] [--precision bf16]
        [--ranks 2 --zero S --mpirun CMD [--sync]] [--extra FLAG]...

Models: `cnn` is Conv2d + BatchNorm2d + ReLU + MaxPool2d + Linear, `mlp`
Linear + BatchNorm1d + ReLU + Linear, each with a cross-entropy loss,
exported with ds.export (training mode). One batch, 6 steps. The layer
before each BatchNorm has no bias, as in ResNet: such a bias gets a zero
gradient in exact arithmetic, and Adam's normalized step of the rounding
noise (+-lr whatever its size) would differ between any two
implementations, and move the running mean with it.

Parity (default): ds-opt --optimizer=O, 6 ds-run steps against the same
torch.optim loop in train mode: each loss within 1e-4 relative; trained
weights within 1e-4 absolute; the running mean and variance (updated by
every forward with torch's momentum rule and the unbiased variance, never
by the optimizer) within 1e-5 relative of torch's. --precision bf16: losses
within 2% of torch's f32 losses, running variances within 2% relative
and running means within 2% of the running standard deviation. --resume: 3
steps, a checkpoint, 3 more from it: the 6-step run's losses, weights and
running stats bit for bit. --extra=--recompute=full: the same numbers (the
recomputed forward does not update the running stats again). --accum K:
--grad-accum=K against torch's K micro-batches per step (the running
stats move once per micro-batch forward, as torch's do).

--eval: the model exported in eval mode (torch.onnx.export, running
statistics set away from 0 and 1) and compiled with --allow-eval-export:
inference BatchNormalization (the running statistics as constants, the
gradient through the affine form) against the same torch loop with the
model in eval mode: losses within 1e-4 relative, the running statistics
bit-unchanged.

--ranks N: N data-parallel ranks (per-rank batch B/N, ZeRO stage S)
against one rank with the whole batch. With --sync (--sync-batchnorm) the
statistics are the global batch's: losses within 1e-5 relative, running
stats within 1e-5 relative. Without it each rank normalizes with its own
half batch (as PyTorch DDP without SyncBatchNorm does): the losses must
then differ from the one-rank run by more than 1e-4 (expected, printed).
"""
import argparse
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "python")]
import ds  # noqa: E402

warnings.filterwarnings("ignore")
STEPS, LR, MOMENTUM, BATCH = 6, 1e-2, 0.9, 8
STATS = ("running_mean", "running_var")


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x, labels):
        h = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return torch.nn.functional.cross_entropy(self.fc(h.flatten(1)), labels)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16, bias=False)
        self.bn = torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 5)

    def forward(self, x, labels):
        return torch.nn.functional.cross_entropy(
            self.fc2(torch.relu(self.bn(self.fc1(x)))), labels)


def make(kind):
    torch.manual_seed(0)
    model = Cnn() if kind == "cnn" else Mlp()
    shape = (BATCH, 3, 8, 8) if kind == "cnn" else (BATCH, 6)
    # Inputs with a mean and scale far from 0 and 1, so that the running
    # statistics move visibly.
    x = torch.randn(*shape) * 2.0 + 0.5
    labels = torch.randint(0, 5, (BATCH,))
    return model, {"x": x, "labels": labels}


def torch_run(model, inputs, optimizer, accum=1):
    """STEPS optimizer steps, each of `accum` micro-batches (the same batch)
    whose mean gradient it applies; every forward updates the running
    statistics. Returns the steps' mean losses and the state."""
    model.train()
    opt = (torch.optim.Adam(model.parameters(), lr=LR) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM))
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        total = 0.0
        for _ in range(accum):
            loss = model(**inputs)
            (loss / accum).backward()
            total += float(loss) / accum
        opt.step()
        losses.append(total)
    return losses, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()
                    if not k.endswith("num_batches_tracked")}


class Run:
    """ds-opt and ds-run on files in the work folder."""

    def __init__(self, args):
        self.args = args
        self.w = lambda f: os.path.join(args.work, f)

    def compile(self, onnx_path, plan, *extra):
        a = self.args
        flags = {"adam": [], "sgd": [f"--momentum={MOMENTUM}"]}[a.optimizer]
        flags += [] if a.precision == "fp32" else [f"--precision={a.precision}"]
        cmd = [a.ds_opt, onnx_path, f"--optimizer={a.optimizer}", f"--lr={LR}", *flags]
        r = subprocess.run(cmd + a.extra + list(extra) + ["-o", plan],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr)

    def train(self, plan, tag, data, prefix=(), steps=STEPS, *extra):
        r = subprocess.run([*prefix, self.args.ds_run, plan, "--steps", str(steps),
                            "--data", data, "--threads", "1",
                            "--log-json", self.w(tag + ".json"),
                            "--save-weights", self.w(tag + ".npz"), *extra],
                           capture_output=True, text=True, timeout=300)
        if r.returncode:
            sys.exit(r.stdout + r.stderr)
        losses = [json.loads(line)["loss"] for line in open(self.w(tag + ".json"))]
        return losses, dict(np.load(self.w(tag + ".npz")))


def rel_err(a, b):
    """Worst |a - b| / max(|b|, 1e-3) over the elements."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-3)))


def stat_err(got, want, scaled=False):
    """The running stats' worst elementwise relative error; with `scaled`
    (16-bit runs, whose near-zero means have no relative precision) the
    mean's error in units of the running standard deviation."""
    worst = 0.0
    for k in want:
        if k.endswith("running_mean") and scaled:
            sd = np.sqrt(want[k.replace("running_mean", "running_var")].astype(np.float64))
            worst = max(worst, float(np.max(np.abs(got[k] - want[k]) / sd)))
        elif k.endswith(STATS):
            worst = max(worst, rel_err(got[k], want[k]))
    return worst


def check_resume(run, plan, data, prefix, losses, weights, problems):
    first, _ = run.train(plan, "first", data, prefix, STEPS // 2, "--save", run.w("ckpt"))
    rest, resumed = run.train(plan, "resumed", data, prefix, STEPS, "--resume", run.w("ckpt"))
    if first + rest != losses:
        problems.append(f"resumed losses {first + rest} differ from {losses}")
    bad = [k for k in weights if not np.array_equal(resumed[k], weights[k])]
    if bad:
        problems.append(f"resumed from the checkpoint, {bad} differ from the straight run")


def eval_main(args, run, model, inputs, problems):
    """Eval-mode export with --allow-eval-export against torch in eval mode."""
    import io
    import onnx
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    buf = io.BytesIO()
    torch.onnx.export(model.eval(), (inputs["x"], inputs["labels"]), buf, opset_version=17,
                      input_names=["x", "labels"], output_names=["loss"],
                      do_constant_folding=False)
    onnx.save(onnx.load_from_string(buf.getvalue()), run.w("eval.onnx"))
    run.compile(run.w("eval.onnx"), run.w("eval.plan"), "--allow-eval-export")
    before = {k: v.numpy().copy() for k, v in model.state_dict().items() if k.endswith(STATS)}
    opt = (torch.optim.Adam(model.parameters(), lr=LR) if args.optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM))
    want = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = model(**inputs)
        loss.backward()
        opt.step()
        want.append(float(loss))
    got, weights = run.train(run.w("eval.plan"), "eval", run.w("data.npz"))
    worst = max(abs(d - t) / abs(t) for d, t in zip(got, want)) if got else 1.0
    if len(got) != STEPS or worst > 1e-4:
        problems.append(f"eval-mode losses ds {got} torch {want}")
    moved = [k for k in before if not np.array_equal(weights[k], before[k])]
    if moved:
        problems.append(f"eval mode changed the running statistics {moved}")
    print(f"{args.model} {args.optimizer} eval-mode export, --allow-eval-export: {STEPS} "
          f"steps, worst loss rel error {worst:.1e} (tol 1e-4); running stats unchanged")


def ranks_main(args, run, model, inputs, problems):
    n = args.ranks
    full_path, part_path = run.w("model.onnx"), run.w("part.onnx")
    part = {k: v[: BATCH // n] for k, v in inputs.items()}
    ds.export(model, part, part_path)
    # Rank r reads rows [r*B/n, (r+1)*B/n) of the batch (ds-run's data
    # sharding), so the n ranks together see the one-rank batch.
    run.compile(full_path, run.w("one.plan"))
    sync = ["--sync-batchnorm"] if args.sync else []
    run.compile(part_path, run.w("n.plan"), f"--world-size={n}", f"--zero={args.zero}",
                "--reduce-bucket-size=100", "--prefetch-bucket-size=100", *sync)
    a, w1 = run.train(run.w("one.plan"), "one", run.w("data.npz"))
    mpi = args.mpirun.split() + ["-np", str(n)]
    b, wn = run.train(run.w("n.plan"), "n", run.w("data.npz"), mpi)
    loss_err = max(abs(p - q) / abs(p) for p, q in zip(a, b))
    serr = stat_err(wn, w1, scaled=args.precision != "fp32")
    tol = 1e-5 if args.precision == "fp32" else 2e-2
    label = (f"{args.model} {args.optimizer} {args.precision} ZeRO-{args.zero}, {n} ranks "
             f"{'--sync-batchnorm' if args.sync else 'per-rank statistics'} against 1")
    if args.sync:
        if len(b) != STEPS or loss_err > tol or serr > tol:
            problems.append(f"losses {loss_err:.1e}, running stats {serr:.1e} (tol {tol:g})")
        if args.resume:
            check_resume(run, run.w("n.plan"), run.w("data.npz"), mpi, b, wn, problems)
        print(f"{label}: worst loss rel error {loss_err:.1e}, running stats {serr:.1e} "
              f"(tol {tol:g})" + ("; checkpoint resumed bit-exact" if args.resume else ""))
    else:
        # Expected: each rank's statistics are its own half batch's.
        if loss_err <= 1e-4:
            problems.append(f"without --sync-batchnorm the losses agree to {loss_err:.1e}: "
                            "were the statistics synchronized?")
        print(f"{label}: losses differ by up to {loss_err:.1e} relative (expected: "
              f"each rank normalizes with its own {BATCH // n} samples)")


def main():
    ap = argparse.ArgumentParser()
    for a in ("--ds-opt", "--ds-run", "--work"):
        ap.add_argument(a, required=True)
    ap.add_argument("--model", choices=["cnn", "mlp"], required=True)
    ap.add_argument("--optimizer", choices=["adam", "sgd"], required=True)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--zero", type=int, default=0)
    ap.add_argument("--mpirun", default="")
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--extra", action="append", default=[])
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    run = Run(args)
    model, inputs = make(args.model)
    np.savez(run.w("data.npz"), **{k: v.numpy() for k, v in inputs.items()})
    ds.export(model, inputs, run.w("model.onnx"))
    problems = []
    if args.eval:
        eval_main(args, run, model, inputs, problems)
    elif args.ranks > 1:
        ranks_main(args, run, model, inputs, problems)
    else:
        run.compile(run.w("model.onnx"), run.w("train.plan"), f"--grad-accum={args.accum}")
        want, trained = torch_run(model, inputs, args.optimizer, args.accum)
        got, weights = run.train(run.w("train.plan"), "train", run.w("data.npz"))
        worst = max(abs(d - t) / abs(t) for d, t in zip(got, want)) if got else 1.0
        tol, stol, wtol = (1e-4, 1e-5, 1e-4) if args.precision == "fp32" else (2e-2,) * 3
        if len(got) != STEPS or worst > tol:
            problems.append(f"losses ds {got} torch {want}")
        if sorted(weights) != sorted(trained):
            problems.append(f"saved tensors {sorted(weights)}, torch {sorted(trained)}")
        worst_w = max(float(np.abs(weights[k] - trained[k]).max())
                      for k in trained if not k.endswith(STATS))
        serr = stat_err(weights, trained, scaled=args.precision != "fp32")
        if args.precision == "fp32" and worst_w > wtol:
            problems.append(f"weights differ from torch's by {worst_w:.1e}")
        if serr > stol:
            problems.append(f"running stats differ from torch's by {serr:.1e} relative")
        if args.resume:
            check_resume(run, run.w("train.plan"), run.w("data.npz"), (), got, weights, problems)
        print(f"{args.model} {args.optimizer} {args.precision}{''.join(' ' + e for e in args.extra)}"
              f"{' --grad-accum=%d' % args.accum if args.accum > 1 else ''}: "
              f"{STEPS} steps, worst loss rel error {worst:.1e} (tol {tol:g}), weights "
              f"{worst_w:.1e}, running stats {serr:.1e} rel (tol {stol:g})"
              + ("; checkpoint resumed bit-exact" if args.resume else ""))
    print("FAIL: " + "; ".join(problems) if problems else "PASS")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
