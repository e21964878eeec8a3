#!/usr/bin/python3
"""The trainable set end to end, on test/Zoo's finetune model (a frozen
Linear+GELU+LayerNorm backbone, a padding_idx=0 embedding, a float position
buffer, a trainable head) and one batch whose last two tokens are padding.

    trainable_set.py --ds-opt ds-opt --ds-run ds-run --work DIR --optimizer O
        [--plain] [--freeze REGEX] [--ranks N --zero S --mpirun CMD]
        [--tp] [--precision P] [--extra FLAG]... [--resume]

Parity (default): ds.export, ds-opt --optimizer=O, 6 ds-run steps on the
batch against the same torch.optim loop: each loss within 1e-4 relative,
the trained weights within 1e-4 absolute. Always: the frozen backbone and
the buffer are bit-unchanged after training, the embedding's padding row is
unchanged while the other rows the batch reads moved, and the plan's report
counts 3 trainable, 4 frozen and 1 buffer tensors.

--plain: a plain torch.onnx.export (no record): ds-opt prints the notice,
and the reference is the torch model without padding_idx (ONNX drops it;
the record is what keeps it). --resume: 3 steps, a checkpoint, 3 more steps
from it give the 6-step run's weights bit for bit. --ranks N: ZeRO stage S
on N ranks (--tp: tensor parallel, the embedding's rows split over the
ranks) against one rank (same batch): losses within 1e-5 relative
(--precision bf16/fp16: 5e-3), weights 1e-5 relative L2 (1e-2).
"""
import argparse
import copy
import json
import os
import subprocess
import sys

import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "Zoo"), os.path.join(HERE, "..", "..", "python")]
import ds  # noqa: E402
import models  # noqa: E402

warnings.filterwarnings("ignore")
STEPS, LR, MOMENTUM = 6, 1e-2, 0.9
LOSS_TOL, WEIGHT_TOL = 1e-4, 1e-4
TRAINED_NUMELS = [30 * 16, 5 * 16, 5]  # emb.weight, head.weight, head.bias
FROZEN = ["backbone.0.weight", "backbone.0.bias", "backbone.2.weight", "backbone.2.bias"]


def export(model, inputs, path, plain):
    if not plain:
        ds.export(model, inputs, path)
        return
    torch.onnx.export(model, (inputs["tokens"], inputs["labels"]), path,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=["tokens", "labels"], output_names=["loss"])


def torch_losses(model, inputs, optimizer, lr=None):
    lr = LR if lr is None else lr
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (torch.optim.Adam(params, lr=lr) if optimizer == "adam"
           else torch.optim.SGD(params, lr=lr, momentum=MOMENTUM))
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = model(**inputs)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


class Run:
    def __init__(self, args):
        self.args = args
        self.w = lambda f: os.path.join(args.work, f)

    def compile(self, onnx_path, plan, *extra):
        flags = [f"--optimizer={self.args.optimizer}", f"--lr={LR}"]
        if self.args.optimizer == "sgd":
            flags.append(f"--momentum={MOMENTUM}")
        if self.args.freeze:
            flags.append(f"--freeze={self.args.freeze}")
        if self.args.precision != "fp32":
            flags.append(f"--precision={self.args.precision}")
        r = subprocess.run([self.args.ds_opt, onnx_path, *flags, *self.args.extra, *extra, "-o", plan,
                            "--report=json"], capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr)
        with open(plan + ".json", "w") as f:
            f.write(r.stdout)
        return r.stderr

    def train(self, plan, tag, prefix=(), steps=STEPS, *extra):
        subprocess.run([*prefix, self.args.ds_run, plan, "--steps", str(steps),
                        "--data", self.w("data.npz"), "--threads", "1",
                        "--log-json", self.w(tag + ".json"),
                        "--save-weights", self.w(tag + ".npz"), *extra],
                       check=True, capture_output=True, text=True, timeout=300)
        losses = [json.loads(line)["loss"] for line in open(self.w(tag + ".json"))]
        return losses, np.load(self.w(tag + ".npz"))


def check_frozen(before, got, tokens, problems):
    """Frozen and buffer tensors bit-unchanged; the padding row unchanged,
    the other rows the batch reads moved."""
    for name in FROZEN + ["pos"]:
        if not np.array_equal(got[name], before[name]):
            problems.append(f"{name} changed in training")
    emb0, emb = before["emb.weight"], got["emb.weight"]
    if not np.array_equal(emb[0], emb0[0]):
        problems.append("the padding row of emb.weight changed")
    used = sorted(set(tokens.flatten().tolist()) - {0})
    still = [r for r in used if np.array_equal(emb[r], emb0[r])]
    if still:
        problems.append(f"rows {still} of emb.weight did not move")
    return len(used)


def check_resume(run, plan, prefix, weights, problems):
    """Half the steps, a checkpoint, the rest from it: the straight run's
    weights bit for bit (frozen tensors saved and restored unchanged)."""
    run.train(plan, "first", prefix, STEPS // 2, "--save", run.w("ckpt"))
    _, resumed = run.train(plan, "resumed", prefix, STEPS, "--resume", run.w("ckpt"))
    bad = [k for k in weights.files if not np.array_equal(resumed[k], weights[k])]
    if bad:
        problems.append(f"resumed from the checkpoint, {bad} differ from the straight run")


def check_report(plan, want, problems, state=True):
    """The report's trainable, frozen and buffer counts are `want`; in
    mixed precision the frozen tensors stay f32 and get no master copy (the
    state of a tensor-parallel plan is split another way: not checked)."""
    rep = json.load(open(plan + ".json"))
    ts = rep.get("trainable_set", {})
    kinds = (ts.get("trainable"), ts.get("frozen"), ts.get("buffers"))
    if kinds != want:
        problems.append(f"report trainable_set {ts}, want {want}")
    state_tensors = {"adam": 2, "sgd": 1}[rep["optimizer"]] + (rep["precision"] != "fp32")
    n = rep["world_size"] if rep["zero_stage"] >= 1 else 1  # ZeRO shards the state
    per_rank = sum(-(-numel // n) for numel in TRAINED_NUMELS)
    if state and rep["memory"]["optimizer_state"] != 4 * state_tensors * per_rank:
        problems.append(f"optimizer state {rep['memory']['optimizer_state']} bytes "
                        f"for Ψ = {rep['psi']}")
    return ts


def main():
    ap = argparse.ArgumentParser()
    for a in ("--ds-opt", "--ds-run", "--work"):
        ap.add_argument(a, required=True)
    ap.add_argument("--optimizer", choices=["adam", "sgd"], required=True)
    ap.add_argument("--plain", action="store_true")
    ap.add_argument("--freeze", default="")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--zero", type=int, default=0)
    ap.add_argument("--mpirun", default="")
    ap.add_argument("--tp", action="store_true",
                    help="the N ranks are tensor-parallel (the embedding split by rows)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--extra", action="append", default=[],
                    help="another ds-opt flag for every plan (--recompute=full)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    run = Run(args)

    model, inputs = models.finetune()
    reference = copy.deepcopy(model)
    before = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    tokens = inputs["tokens"].numpy()
    np.savez(run.w("data.npz"), tokens=tokens, labels=inputs["labels"].numpy())
    onnx_path = run.w("model.onnx")
    export(model, inputs, onnx_path, args.plain)
    problems = []

    if args.ranks > 1:
        # N ranks with per-rank batch 4/N (tensor parallel: 4, the
        # embedding's rows split) against one rank with batch 4.
        part_path, grid = run.w("part.onnx"), [f"--zero={args.zero}"]
        if args.tp:
            part_path, grid = onnx_path, [f"--tensor-parallel={args.ranks}"]
        else:
            part = {k: v[: 4 // args.ranks] for k, v in inputs.items()}
            export(model, part, part_path, args.plain)
        run.compile(onnx_path, run.w("one.plan"))
        run.compile(part_path, run.w("n.plan"), f"--world-size={args.ranks}", *grid,
                    "--reduce-bucket-size=100", "--prefetch-bucket-size=100")
        ts = check_report(run.w("n.plan"), (3, 4, 1), problems, state=not args.tp)
        a, w1 = run.train(run.w("one.plan"), "one")
        mpi = args.mpirun.split() + ["-np", str(args.ranks)]
        b, wn = run.train(run.w("n.plan"), "n", mpi)
        loss_err = max(abs(p - q) / abs(p) for p, q in zip(a, b))
        diff = sum(float(np.sum((w1[k].astype(np.float64) - wn[k]) ** 2)) for k in w1.files)
        norm = sum(float(np.sum(w1[k].astype(np.float64) ** 2)) for k in w1.files)
        rel = (diff / norm) ** 0.5
        tol, wtol = (1e-5, 1e-5) if args.precision == "fp32" else (5e-3, 1e-2)
        if len(a) != STEPS or len(b) != STEPS or loss_err > tol or rel > wtol:
            problems.append(f"{args.ranks} ranks differ from one: loss {loss_err:.1e}, weights {rel:.1e}")
        rows = check_frozen(before, wn, tokens, problems)
        if args.resume:
            check_resume(run, run.w("n.plan"), mpi, wn, problems)
        print(f"finetune {args.optimizer} {args.precision} "
              f"{'TP' if args.tp else 'ZeRO-' + str(args.zero)}"
              f"{''.join(' ' + e for e in args.extra)}, {args.ranks} ranks "
              f"against 1: worst loss rel error {loss_err:.1e} (tol {tol:g}), weights relative "
              f"L2 {rel:.1e} (tol {wtol:g}); frozen {ts.get('frozen')} ({ts.get('frozen_bytes')} "
              f"bytes per rank) and the buffer unchanged, padding row unchanged, {rows} rows moved"
              + ("; checkpoint resumed bit-exact" if args.resume else ""))
        print("FAIL: " + "; ".join(problems) if problems else "PASS")
        sys.exit(1 if problems else 0)

    notice = run.compile(onnx_path, run.w("train.plan"))
    for line in notice.splitlines():
        if "trainable record" in line:
            print(line.strip())
    if args.plain and not args.freeze:
        # It trains every float initializer, the backbone and the position
        # table too: nothing to compare with the fine-tuning loop.
        sys.exit(0)
    ts = check_report(run.w("train.plan"), (3, 5, 0) if args.plain else (3, 4, 1),
                      problems)
    if args.plain:
        reference.emb.padding_idx = None  # ONNX keeps no padding_idx
    want = torch_losses(reference, inputs, args.optimizer)
    got, weights = run.train(run.w("train.plan"), "train")
    worst = max(abs(d - t) / abs(t) for d, t in zip(got, want)) if got else 1.0
    if len(got) != STEPS or worst > LOSS_TOL:
        problems.append(f"losses ds {got} torch {want}")
    trained = {k: v.detach().numpy() for k, v in reference.state_dict().items()}
    worst_w = max(float(np.abs(weights[k] - trained[k]).max()) for k in trained)
    if worst_w > WEIGHT_TOL:
        problems.append(f"weights differ from torch's by {worst_w:.1e}")
    rows = 0
    if not args.plain:
        rows = check_frozen(before, weights, tokens, problems)
    if args.resume:
        check_resume(run, run.w("train.plan"), (), weights, problems)
    print(f"finetune {args.optimizer}{' plain' if args.plain else ''}"
          f"{' --freeze=' + args.freeze if args.freeze else ''}: {STEPS} steps, worst loss rel "
          f"error {worst:.1e} (tol {LOSS_TOL:g}), weights {worst_w:.1e} (tol {WEIGHT_TOL:g}); "
          f"trainable {ts.get('trainable')} ({ts.get('trainable_bytes')} bytes), frozen "
          f"{ts.get('frozen')} ({ts.get('frozen_bytes')} bytes), buffers {ts.get('buffers')} "
          f"({ts.get('buffer_bytes')} bytes)" + (f"; padding row kept, {rows} rows moved" if rows else "")
          + ("; checkpoint resumed bit-exact" if args.resume else ""))
    print("FAIL: " + "; ".join(problems) if problems else "PASS")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
