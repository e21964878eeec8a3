#!/usr/bin/python3
"""ds-run --eval-data: the plan's eval section against the training loss
and PyTorch, on the bundled GPT ("tiny", exported with dynamic batch).

  step0   dropout 0: the eval loss at step 0 on the training batch equals
          the first training loss (the same forward) within 1e-6 relative.
  torch   after 4 Adam steps, the eval loss over 2 batches equals PyTorch's
          eval() loss of the trained weights (--save-weights, loaded into
          the torch GPT) within 1e-5 relative (f32 on both sides, sums in
          another order).
  dropout a GPT exported with dropout 0.1: the step-0 eval loss equals
          torch's eval() loss (dropout off) within 1e-5 relative, while the
          first training loss (dropout on) is more than 1e-4 away (measured
          8.4e-4; equal forwards agree within 1e-6).
  ranks   2 ranks, ZeRO-3 (batch 4 each) against 1 rank (batch 8): every
          eval loss (steps 0, 2, 4) within 1e-6 relative (the ranks' mean
          and, after training, the gradient averages differ in float
          order only; measured <= 1e-7).
  tp      the same with 2 tensor-parallel ranks (batch 8 each).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
import export_gpt  # noqa: E402


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def verdict(what, got, want, tol, above=False):
    r = rel(got, want)
    ok = r > tol if above else r <= tol
    print("%s: ds %.7f other %.7f rel %.2e %s" % (
        what, got, want, r, "ok" if ok else "FAIL (%s %g)" % (
            "must exceed" if above else "tolerance", tol)))
    return ok


class Tool:
    def __init__(self, args):
        self.args = args
        self.w = lambda f: os.path.join(args.work, f)

    def model(self, dropout):
        path = self.w("gpt_d%g.onnx" % dropout)
        if not os.path.exists(path):
            subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gpt",
                                                         "export_gpt.py"),
                            "--dynamic", "--dropout", str(dropout), "-o", path],
                           check=True, capture_output=True)
        return path

    def compile(self, onnx, name, rows, extra=()):
        plan = self.w(name + ".plan")
        subprocess.run([self.args.ds_opt, onnx, "--input-shape=idx:%dx32" % rows,
                        "--input-shape=targets:%dx32" % rows, "--optimizer=adam",
                        "--lr=3e-3", *extra, "-o", plan],
                       check=True, capture_output=True)
        return plan

    def run(self, plan, tag, data, evald, steps, every, mpi=0):
        prefix = self.args.mpirun.split() + ["-np", str(mpi)] if mpi else []
        subprocess.run(prefix + [self.args.ds_run, plan, "--steps", str(steps),
                                 "--data", data, "--eval-data", evald,
                                 "--eval-every", str(every), "--threads", "1",
                                 "--log-json", self.w(tag + ".json"),
                                 "--save-weights", self.w(tag + ".npz")],
                       check=True, capture_output=True, text=True, timeout=300)
        train, evals = [], []
        for line in open(self.w(tag + ".json")):
            j = json.loads(line)
            (evals if "eval_loss" in j else train).append(j)
        return ([j["loss"] for j in train],
                [(j["step"], j["eval_loss"]) for j in evals])


def torch_eval(weights, dropout, batches):
    """PyTorch's eval() loss of the GPT with `weights` (name -> array),
    the mean over `batches`."""
    model, _, _ = export_gpt.build("tiny", dropout=dropout)
    state = {k: torch.from_numpy(np.array(
        weights["wte.weight" if k == "lm_head.weight" else k]))
        for k in model.state_dict()}
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        losses = [float(model(torch.from_numpy(i), torch.from_numpy(t))[1])
                  for i, t in batches]
    return sum(losses) / len(losses)


def onnx_weights(path):
    import onnx
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("mode", choices=["step0", "torch", "dropout", "ranks", "tp"])
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    t = Tool(args)
    rng = np.random.RandomState(0)
    train = rng.randint(0, 128, size=(2, 8, 32))
    held = rng.randint(0, 128, size=(2, 16, 32))
    np.savez(t.w("train.npz"), idx=train[0], targets=train[1])
    np.savez(t.w("eval.npz"), idx=held[0], targets=held[1])  # 2 batches of 8
    batches = [(held[0][k * 8:(k + 1) * 8], held[1][k * 8:(k + 1) * 8])
               for k in range(2)]
    ok = True
    if args.mode == "step0":
        plan = t.compile(t.model(0.0), "one", 8)
        losses, evals = t.run(plan, "step0", t.w("train.npz"), t.w("train.npz"), 1, 1)
        print("eval steps %s" % [s for s, _ in evals])
        ok = verdict("step 0 eval loss vs first training loss", evals[0][1],
                     losses[0], 1e-6)
    elif args.mode == "torch":
        plan = t.compile(t.model(0.0), "one", 8)
        _, evals = t.run(plan, "torch", t.w("train.npz"), t.w("eval.npz"), 4, 2)
        print("eval steps %s" % [s for s, _ in evals])
        w = dict(np.load(t.w("torch.npz")))
        ok = verdict("step 4 eval loss vs torch eval() of the trained weights",
                     evals[-1][1], torch_eval(w, 0.0, batches), 1e-5)
    elif args.mode == "dropout":
        onnx = t.model(0.1)
        plan = t.compile(onnx, "drop", 8)
        losses, evals = t.run(plan, "drop", t.w("train.npz"), t.w("eval.npz"), 1, 1)
        init = onnx_weights(onnx)
        ok = verdict("step 0 eval loss vs torch eval() (dropout off)",
                     evals[0][1], torch_eval(init, 0.1, batches), 1e-5)
        tb = [(train[0], train[1])]
        _, evtrain = t.run(plan, "drop_same", t.w("train.npz"), t.w("train.npz"), 1, 1)
        ok &= verdict("eval loss on the training batch vs the training loss "
                      "(dropout on)", evtrain[0][1], losses[0], 1e-4, above=True)
        ok &= verdict("eval loss on the training batch vs torch eval()",
                      evtrain[0][1], torch_eval(init, 0.1, tb), 1e-5)
    else:
        onnx = t.model(0.0)
        one = t.compile(onnx, "one", 8)
        tp = args.mode == "tp"
        two = t.compile(onnx, args.mode, 8 if tp else 4,
                        ["--world-size=2", "--tensor-parallel=2"] if tp
                        else ["--world-size=2", "--zero=3"])
        _, e1 = t.run(one, "r1", t.w("train.npz"), t.w("eval.npz"), 4, 2)
        _, e2 = t.run(two, "r2" + args.mode, t.w("train.npz"), t.w("eval.npz"),
                      4, 2, mpi=2)
        print("eval steps %s and %s" % ([s for s, _ in e1], [s for s, _ in e2]))
        ok = [s for s, _ in e1] == [s for s, _ in e2]
        for (s, a), (_, b) in zip(e1, e2):
            ok &= verdict("step %d eval loss, 2 ranks %s vs 1 rank" % (
                s, "tensor-parallel" if tp else "ZeRO-3"), b, a, 1e-6)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
