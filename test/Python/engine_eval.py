#!/usr/bin/python3
"""engine.eval_batch and engine.eval() against PyTorch's evaluation: the
bundled-size GPT ("tiny") with dropout 0.1, so that evaluating with the
training step's dropout would be caught.

Modes: one (a single process), zero3 (under mpirun -np 2 with ZeRO-3:
each rank gives its half of every batch; the loss is the mean over the
ranks, torch's is on the whole batch).

Checks: before training and after 3 steps, eval_batch over 2 batches
equals torch's eval()/no_grad() mean loss of the same weights (the initial
ones, then engine.module's trained ones) within 1e-5 relative (f32 on both
sides, sums in another order); eval_batch trains nothing (global_steps and
every parameter unchanged, bit for bit); after engine.eval(),
engine(**batch) evaluates (the same value as eval_batch, no backward
needed) until engine.train().
"""
import copy
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "gpt"))
import export_gpt  # noqa: E402
from engine_parity import LossOnly, batches, check  # noqa: E402

import ds  # noqa: E402

TOL = 1e-5


def torch_eval(model, data):
    model = copy.deepcopy(model).eval()
    with torch.no_grad():
        return sum(float(model(**b)) for b in data) / len(data)


def main():
    mode = sys.argv[1]
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    if len(sys.argv) > 2:  # one file per rank (mpirun interleaves stdout)
        sys.stdout = open("%s.%d" % (sys.argv[2], rank), "w")
    vocab, block, layers, heads, d, rows, seq = export_gpt.SIZES["tiny"]
    torch.manual_seed(0)
    model = LossOnly(export_gpt.GPT(vocab, block, layers, heads, d, 0.1))
    initial = copy.deepcopy(model)
    part = rows // world
    mine = slice(rank * part, (rank + 1) * part)
    cut = lambda b: {k: v[mine] for k, v in b.items()}
    cfg = {"train_batch_size": rows, "train_micro_batch_size_per_gpu": part,
           "optimizer": {"type": "Adam", "params": {"lr": 2e-3}}}
    if mode == "zero3":
        cfg["zero_optimization"] = {"stage": 3}
    engine, _, _, _ = ds.initialize(model=model, config=cfg)
    held = batches(vocab, rows, seq, 2, seed=11)
    tag = "rank %d " % rank if world > 1 else ""
    got = float(engine.eval_batch(iter([cut(b) for b in held]),
                                  num_micro_batches=2))
    ok = check(tag + "eval_batch before training", got,
               torch_eval(initial, held), TOL)
    for b in batches(vocab, rows, seq, 3, seed=5):
        loss = engine(**cut(b))
        engine.backward(loss)
        engine.step()
    plan_values = lambda: {n: engine._session.parameter(n)
                           for n in engine._session.parameter_names()}
    before = plan_values()
    got = float(engine.eval_batch(iter([cut(b) for b in held]),
                                  num_micro_batches=2))
    ok &= check(tag + "eval_batch after 3 steps", got,
                torch_eval(engine.module, held), TOL)
    after = plan_values()
    same = engine.global_steps == 3 and all(
        (before[k] == after[k]).all() for k in before)
    print("%seval_batch trained nothing: %s" % (tag, "ok" if same else "FAIL"))
    engine.eval()
    one = float(engine(**cut(held[0])))
    engine.train()
    again = float(engine.eval_batch(iter([cut(held[0])]), num_micro_batches=1))
    print("%sengine.eval(); engine(batch) evaluates: %s" % (
        tag, "ok" if one == again and engine.global_steps == 3 else "FAIL"))
    ok &= same and one == again
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
