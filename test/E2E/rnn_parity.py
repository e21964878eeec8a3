#!/usr/bin/python3
"""LSTM and GRU (imported as unrolled ds ops) against PyTorch.

    rnn_parity.py grad  --model lstm2bi|gru2|gru_lbr0 ... (step-0 gradients)
    rnn_parity.py train --model lstm_lm|gru_classifier --optimizer adam|sgd
        [--precision bf16] [--ranks 2 --zero 3 --mpirun CMD] ...

grad: ds.export (torch 1.13, training mode, opset 17), ds-opt --emit-grads
and ds-run against torch autograd on the same batch: the loss and every
parameter's gradient within 1e-4 relative (per parameter max |ds - torch|
/ max |torch|; f32 on both sides, sums in another order). Models:
  lstm2bi  2-layer bidirectional batch_first LSTM from given h0 and c0, its
           Y, Y_h and Y_c all reaching the loss
  gru2     2-layer unidirectional GRU (time-major) from a given h0, Y and Y_h
  gru_lbr0 the ONNX GRU with linear_before_reset=0 (torch never exports it:
           the graph is edited after export and torch's reference is the
           same equations written out)

train: test/Zoo's lstm_lm or gru_classifier, ds.export, ds-opt
--optimizer=O and 6 ds-run steps against the same torch.optim loop on the
same batch: each loss within 1e-4 relative (fp32, also with --extra
--recompute=full). --precision bf16/fp16: each loss within 2% of torch's
fp32 loss. --ranks N --zero S: N ranks (per-rank
batch 4/N) against one rank (batch 4) in ds: losses within 1e-5 relative,
weights within 1e-5 relative L2.
"""
import argparse
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "Zoo"), os.path.join(HERE, "..", "..", "python")]
import ds  # noqa: E402
import models  # noqa: E402
# The same torch.optim loop, steps and hyperparameters as the trainable-set test.
from trainable_set import LR, MOMENTUM, STEPS, torch_losses  # noqa: E402

warnings.filterwarnings("ignore")
GRAD_TOL, LOSS_TOL, BF16_TOL = 1e-4, 1e-4, 2e-2


class Lstm2Bi(nn.Module):
    """2-layer bidirectional batch_first LSTM from given states; Y, Y_h and
    Y_c all reach the loss."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 6, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(12, 3)

    def forward(self, x, h0, c0, y):
        out, (h, c) = self.lstm(x, (h0, c0))
        logits = self.head(out).mean(dim=1)
        return F.cross_entropy(logits, y) + 0.1 * (h * c).sum().tanh()


class Gru2(nn.Module):
    """2-layer time-major GRU from a given state; Y and Y_h reach the loss."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 7, num_layers=2)
        self.head = nn.Linear(7, 3)

    def forward(self, x, h0, y):
        out, h = self.gru(x, h0)
        return F.cross_entropy(self.head(out[-1]), y) + 0.1 * h.pow(2).mean()


class GruLbr0(nn.Module):
    """One GRU layer written out with ONNX's linear_before_reset=0 equations:
    h~ = tanh(W_h x + b_ih_h + R_h (r * H) + b_hh_h)."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 7)
        self.head = nn.Linear(7, 3)

    def forward(self, x, h0, y):
        g, hid = self.gru, 7
        wi, wh, bi, bh = g.weight_ih_l0, g.weight_hh_l0, g.bias_ih_l0, g.bias_hh_l0
        h = h0[0]
        for t in range(x.shape[0]):
            xi = x[t] @ wi.t() + bi
            r_ = torch.sigmoid(xi[:, :hid] + h @ wh[:hid].t() + bh[:hid])
            z = torch.sigmoid(xi[:, hid:2 * hid] + h @ wh[hid:2 * hid].t() + bh[hid:2 * hid])
            n = torch.tanh(xi[:, 2 * hid:] + (r_ * h) @ wh[2 * hid:].t() + bh[2 * hid:])
            h = (1 - z) * n + z * h
        return F.cross_entropy(self.head(h), y)


def grad_model(which):
    torch.manual_seed(0)
    rng = np.random.RandomState(5)
    if which == "lstm2bi":
        model = Lstm2Bi()
        feeds = {"x": rng.randn(3, 4, 5), "h0": rng.randn(4, 3, 6),
                 "c0": rng.randn(4, 3, 6)}
    else:
        model = Gru2() if which == "gru2" else GruLbr0()
        layers = 2 if which == "gru2" else 1
        feeds = {"x": rng.randn(4, 3, 5), "h0": rng.randn(layers, 3, 7)}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    feeds["y"] = rng.randint(0, 3, size=3).astype(np.int64)
    return model, feeds


def set_linear_before_reset_0(path):
    """The exported GRU with linear_before_reset=0 (what the ONNX default
    computes; torch 1.13 only exports 1)."""
    m = onnx.load(path)
    for n in m.graph.node:
        if n.op_type == "GRU":
            for a in n.attribute:
                if a.name == "linear_before_reset":
                    a.i = 0
    onnx.save(m, path)


def grad(args):
    model, feeds = grad_model(args.model)
    tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
    path = os.path.join(args.work, args.model + ".onnx")
    if args.model == "gru_lbr0":
        ds.export(Gru2Export(model), tensors, path)
        set_linear_before_reset_0(path)
    else:
        ds.export(model, tensors, path)
    loss = model(**tensors)
    loss.backward()
    inputs = os.path.join(args.work, "in.npz")
    np.savez(inputs, **feeds)
    plan, out = os.path.join(args.work, "grads.plan"), os.path.join(args.work, "out.npz")
    subprocess.run([args.ds_opt, path, "--emit-grads", "-o", plan], check=True)
    subprocess.run([args.ds_run, plan, "--forward-only", "--inputs", inputs,
                    "--outputs", out, "--threads", "2"], check=True, capture_output=True)
    got = np.load(out)
    problems = []
    rel = abs(float(got["loss"]) - float(loss)) / abs(float(loss))
    if rel > GRAD_TOL:
        problems.append(f"loss ds {float(got['loss'])} torch {float(loss)}")
    worst, checked = 0.0, 0
    for name, p in model.named_parameters():
        if "grad:" + name not in got.files:
            problems.append(f"no gradient for '{name}'")
            continue
        ref = p.grad.numpy()
        err = float(np.max(np.abs(got["grad:" + name] - ref)) / max(np.max(np.abs(ref)), 1e-30))
        worst, checked = max(worst, err), checked + 1
        if err > GRAD_TOL:
            problems.append(f"grad of {name}: max relative error {err:.2e}")
    print(f"{args.model}: loss rel error {rel:.1e}; {checked} parameter gradients, "
          f"worst relative error {worst:.2e} (tolerance {GRAD_TOL:g})")
    return problems


class Gru2Export(nn.Module):
    """What is exported for gru_lbr0: an nn.GRU with GruLbr0's weights (the
    exported node is then switched to linear_before_reset=0)."""

    def __init__(self, ref):
        super().__init__()
        self.gru, self.head = ref.gru, ref.head

    def forward(self, x, h0, y):
        out, _ = self.gru(x, h0)
        return F.cross_entropy(self.head(out[-1]), y)


def ds_train(args, onnx_path, tag, prefix=(), *extra):
    w = lambda f: os.path.join(args.work, f)
    flags = [f"--optimizer={args.optimizer}", f"--lr={LR}"]
    if args.optimizer == "sgd":
        flags.append(f"--momentum={MOMENTUM}")
    if args.precision != "fp32":
        flags.append(f"--precision={args.precision}")
    plan = w(tag + ".plan")
    r = subprocess.run([args.ds_opt, onnx_path, *flags, *args.extra, *extra, "-o", plan],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr)
    subprocess.run([*prefix, args.ds_run, plan, "--steps", str(STEPS), "--data", w("data.npz"),
                    "--threads", "1", "--log-json", w(tag + ".json"),
                    "--save-weights", w(tag + ".npz")],
                   check=True, capture_output=True, text=True, timeout=600)
    losses = [json.loads(line)["loss"] for line in open(w(tag + ".json"))]
    return losses, np.load(w(tag + ".npz"))


def train(args):
    model, inputs = models.ZOO[args.model]()
    np.savez(os.path.join(args.work, "data.npz"), **{k: v.numpy() for k, v in inputs.items()})
    onnx_path = os.path.join(args.work, "model.onnx")
    ds.export(model, inputs, onnx_path)
    problems = []
    name = f"{args.model} {args.optimizer} {args.precision}{''.join(' ' + e for e in args.extra)}"
    if args.ranks > 1:
        part = {k: v[: 4 // args.ranks] for k, v in inputs.items()}
        part_path = os.path.join(args.work, "part.onnx")
        ds.export(model, part, part_path)
        a, w1 = ds_train(args, onnx_path, "one")
        mpi = args.mpirun.split() + ["-np", str(args.ranks)]
        b, wn = ds_train(args, part_path, "n", mpi, f"--world-size={args.ranks}",
                         f"--zero={args.zero}")
        err = max(abs(p - q) / abs(p) for p, q in zip(a, b))
        diff = sum(float(np.sum((w1[k].astype(np.float64) - wn[k]) ** 2)) for k in w1.files)
        norm = sum(float(np.sum(w1[k].astype(np.float64) ** 2)) for k in w1.files)
        rel = (diff / norm) ** 0.5
        if len(a) != STEPS or len(b) != STEPS or err > 1e-5 or rel > 1e-5:
            problems.append(f"{args.ranks} ranks differ from one: loss {err:.1e}, weights {rel:.1e}")
        print(f"{name} ZeRO-{args.zero}, {args.ranks} ranks against 1: worst loss rel "
              f"error {err:.1e} (tol 1e-05), weights relative L2 {rel:.1e} (tol 1e-05)")
        return problems
    want = torch_losses(model, inputs, args.optimizer)
    got, _ = ds_train(args, onnx_path, "train")
    tol = LOSS_TOL if args.precision == "fp32" else BF16_TOL
    worst = max(abs(d - t) / abs(t) for d, t in zip(got, want)) if got else 1.0
    if len(got) != STEPS or worst > tol:
        problems.append(f"losses ds {got} torch {want}")
    print(f"{name}: {STEPS} steps, worst loss rel error {worst:.1e} (tol {tol:g}); "
          f"loss {want[0]:.4f} -> {want[-1]:.4f}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["grad", "train"])
    for a in ("--ds-opt", "--ds-run", "--work", "--model"):
        ap.add_argument(a, required=True)
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--extra", action="append", default=[],
                    help="another ds-opt flag for every plan (--recompute=full)")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--zero", type=int, default=0)
    ap.add_argument("--mpirun", default="")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    problems = grad(args) if args.mode == "grad" else train(args)
    print("FAIL: " + "; ".join(problems) if problems else "PASS")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
