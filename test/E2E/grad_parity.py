#!/usr/bin/python3
"""Step-0 gradients of ds (ds-opt --emit-grads + ds-run) against PyTorch's
autograd, per parameter, on the same weights and batch.

Models: the GPT example (tied embedding: one initializer used twice);
`gpt-long`, a one-layer causal GPT at T=300 (with `--opt-flag=--fuse-attention`
the fused attention's forward and gradient cross its 64-row and 256-column
tiles and skip the causal mask's upper tiles; the check then also asserts
that the plan runs ds.fused_attention);
nn.MultiheadAttention sequence-first (`mha`); an
MLP with two branches, a shared weight and LayerNorm; a classifier whose
loss is LogSoftmax + NLLLoss; `act-NAME`, Linear -> one activation ->
Linear -> cross entropy for each activation of ACTIVATIONS (its
pre-activations spread over about [-7, 7] to cross every kink). Exported as REFERENCES.md says (TRAINING,
no constant folding, opset 17). Tolerance: per parameter,
max |ds - torch| / max |torch| <= 1e-5 (f32 both sides; sums in another
order), and the loss within 1e-5 relative.
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
import export_gpt  # noqa: E402

TOL = 1e-5


class Branches(nn.Module):
    """Two branches through one shared Linear, LayerNorm, a residual."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(12, 16)
        self.shared = nn.Linear(16, 16)
        self.ln = nn.LayerNorm(16)
        self.head = nn.Linear(16, 5)

    def forward(self, x, y):
        h = torch.tanh(self.inp(x))
        a = F.relu(self.shared(h))
        b = torch.sigmoid(self.shared(h * 0.5))
        z = self.ln(a + b) + h
        return F.cross_entropy(self.head(z), y)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 7)

    def forward(self, x, y):
        logp = F.log_softmax(self.fc2(F.gelu(self.fc1(x))), dim=1)
        return F.nll_loss(logp, y)


class Mha(nn.Module):
    """nn.MultiheadAttention sequence-first (batch_first=False): its input
    projection is a MatMul of a [T, B, d] input with a shared [d, 3d]
    weight, whose gradient folds the batch into one GEMM (issue 24)."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, dropout=0.0)
        self.head = nn.Linear(32, 11)

    def forward(self, x, y):
        h, _ = self.attn(x, x, x, need_weights=False)
        return F.cross_entropy(self.head(h).reshape(-1, 11), y.reshape(-1))


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class TiedMin(nn.Module):
    """h scaled by the minimum of two equal parameters: every minimum is a
    tie, whose gradient torch.amin splits evenly."""

    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.linspace(-1.0, 1.0, 16))
        self.q = nn.Parameter(torch.linspace(-1.0, 1.0, 16))

    def forward(self, h):
        return h * torch.amin(torch.stack([self.p, self.q]), dim=0)


# The activations and what torch 1.13 exports them as (opset 17).
ACTIVATIONS = {
    "relu6": lambda: nn.ReLU6(),                                  # Clip
    "hardtanh": lambda: nn.Hardtanh(-1.0, 2.0),                   # Clip
    "leaky_relu": lambda: nn.LeakyReLU(0.1),
    "elu": lambda: nn.ELU(0.7),
    "selu": lambda: nn.SELU(),
    "celu": lambda: nn.CELU(1.5),
    "prelu": lambda: nn.PReLU(16, 0.2),  # its slope is a parameter
    "softplus": lambda: nn.Softplus(),
    "softsign": lambda: nn.Softsign(),
    "hardsigmoid": lambda: nn.Hardsigmoid(),
    "hardswish": lambda: nn.Hardswish(),
    "mish": lambda: nn.Mish(),  # Softplus, Tanh, Mul
    "sin": lambda: Lambda(torch.sin),
    "cos": lambda: Lambda(torch.cos),
    # Reductions and element indexing (issue 22), shaped to keep h's shape.
    "reduce_l2": lambda: Lambda(lambda h: h - h.norm(p=2, dim=1, keepdim=True)),
    "logsumexp": lambda: Lambda(lambda h: h - torch.logsumexp(h, dim=1, keepdim=True)),
    "amin": lambda: Lambda(lambda h: h * torch.amin(h, dim=0)),  # ReduceMin
    "amin_ties": lambda: TiedMin(),
    "amax": lambda: Lambda(lambda h: h * torch.amax(h, dim=1, keepdim=True)),
    "cumsum": lambda: Lambda(lambda h: 0.25 * torch.cumsum(h, dim=1)),
    "gather": lambda: Lambda(lambda h: torch.gather(h, 1, INDEX[1])),
    "scatter_add": lambda: Lambda(lambda h: h.scatter_add(0, INDEX[0], h * h)),
    "scatter": lambda: Lambda(lambda h: h.scatter(0, ROWS, 2 * h[:8])),
}
# Constant indices for gather (along the 16 features) and scatter_add
# (along the 32 rows of the batch).
INDEX = [torch.from_numpy(np.random.RandomState(7).randint(0, n, size=(32, 16)))
         for n in (32, 16)]
# Distinct rows per column (scatter without reduction: no duplicates).
ROWS = torch.from_numpy(np.stack([np.random.RandomState(c).permutation(32)[:8]
                                  for c in range(16)], axis=1))


class Activation(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.inp = nn.Linear(12, 16)
        self.act = ACTIVATIONS[name]()
        self.head = nn.Linear(16, 5)

    def forward(self, x, y):
        return F.cross_entropy(self.head(self.act(4 * self.inp(x))), y)


def export(model, args, path, names):
    torch.onnx.export(model, args, path, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=names, output_names=["loss"])


def setup(which, work):
    """The model (torch, with the ONNX file's weights), the ONNX path, the
    batch as numpy arrays, and a closure computing the torch loss."""
    torch.manual_seed(0)
    rng = np.random.RandomState(5)
    if which == "gpt":
        path = os.path.join(ROOT, "examples", "gpt", "gpt.onnx")
        model, idx, targets = export_gpt.build("tiny")
        weights = export_gpt.load_onnx_weights(model, path)
        vocab = weights["wte.weight"].shape[0]
        x = rng.randint(0, vocab, size=tuple(idx.shape)).astype(np.int64)
        y = rng.randint(0, vocab, size=tuple(targets.shape)).astype(np.int64)
        y[1, :5] = -100
        feeds = {"idx": x, "targets": y}
        forward = lambda: model(torch.from_numpy(x), torch.from_numpy(y))[1]
    elif which == "gpt-long":
        # vocab, block, layers, heads, d_model, batch, seq
        export_gpt.SIZES["gpt-long"] = (64, 300, 1, 2, 32, 2, 300)
        model, idx, targets = export_gpt.build("gpt-long")
        path = os.path.join(work, "gpt-long.onnx")
        export_gpt.export(model, idx, targets, path)
        x, y = idx.numpy(), targets.numpy()
        feeds = {"idx": x, "targets": y}
        forward = lambda: model(torch.from_numpy(x), torch.from_numpy(y))[1]
    elif which == "mha":
        model = Mha()
        x = rng.randn(16, 3, 32).astype(np.float32)
        y = rng.randint(0, 11, size=(16, 3)).astype(np.int64)
        path = os.path.join(work, "mha.onnx")
        export(model, (torch.from_numpy(x), torch.from_numpy(y)), path, ["x", "y"])
        feeds = {"x": x, "y": y}
        forward = lambda: model(torch.from_numpy(x), torch.from_numpy(y))
    else:
        if which.startswith("act-"):
            model = Activation(which[4:])
        else:
            model = Branches() if which == "branches" else Classifier()
        n_in = 20 if which == "classifier" else 12
        classes = 7 if which == "classifier" else 5
        batch = 32 if which.startswith("act-") else 6
        x = rng.randn(batch, n_in).astype(np.float32)
        y = rng.randint(0, classes, size=batch).astype(np.int64)
        path = os.path.join(work, which + ".onnx")
        export(model, (torch.from_numpy(x), torch.from_numpy(y)), path, ["x", "y"])
        feeds = {"x": x, "y": y}
        forward = lambda: model(torch.from_numpy(x), torch.from_numpy(y))
    return model, path, feeds, forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", required=True,
                    choices=["gpt", "gpt-long", "branches", "classifier", "mha"] +
                    ["act-" + a for a in ACTIVATIONS])
    ap.add_argument("--opt-flag", action="append", default=[],
                    help="an extra ds-opt flag (repeatable); with "
                         "--fuse-attention the plan must run ds.fused_attention")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model, path, feeds, forward = setup(args.model, args.work)
    ok = check(args.model, model, path, feeds, forward, args)
    sys.exit(0 if ok else 1)


def check(name, model, path, feeds, forward, args, tol=TOL):
    """Runs ds on the exported model and compares the loss and every
    parameter's gradient with torch's; prints the verdict, returns it."""
    loss = forward()
    params = dict(model.named_parameters())
    loss.backward()

    inputs = os.path.join(args.work, "in.npz")
    np.savez(inputs, **feeds)
    plan = os.path.join(args.work, "grads.plan")
    out = os.path.join(args.work, "out.npz")
    flags = getattr(args, "opt_flag", [])
    subprocess.run([args.ds_opt, path, "--emit-grads", "-o", plan] + flags, check=True)
    if any(f.startswith("--fuse-attention") and not f.endswith("=false") for f in flags):
        summary = subprocess.run([args.ds_opt, path, "--emit-grads", "--emit=summary"] + flags,
                                 check=True, capture_output=True, text=True).stdout
        fused = ("ds.fused_attention_grad" in summary
                 and re.search(r"ds\.softmax\s", summary) is None)
        print(f"{name}: plan runs fused_attention and its gradient, no softmax: {fused}")
        ok_fused = fused
    else:
        ok_fused = True
    subprocess.run([args.ds_run, plan, "--forward-only", "--inputs", inputs,
                    "--outputs", out, "--threads", "2"], check=True, capture_output=True)
    got = np.load(out)
    ok = ok_fused
    rel = abs(float(got["loss"]) - float(loss)) / abs(float(loss))
    print(f"{name}: loss ds {float(got['loss']):.7f} torch {float(loss):.7f} (rel {rel:.1e})")
    ok &= rel <= tol
    worst, checked = 0.0, 0
    for pname, p in params.items():
        key = "grad:" + pname
        if key not in got.files:
            print(f"FAIL no gradient output for parameter '{pname}'")
            ok = False
            continue
        ref = p.grad.numpy()
        g = got[key]
        err = float(np.max(np.abs(g - ref)) / max(np.max(np.abs(ref)), 1e-30))
        worst = max(worst, err)
        checked += 1
        if err > tol:
            print(f"FAIL grad of {pname}: max relative error {err:.2e}")
            ok = False
    print(f"{name}: {checked} parameter gradients, worst relative error {worst:.2e} (tolerance {tol:g})")
    print("PASS" if ok else "FAIL")
    return ok


if __name__ == "__main__":
    main()
