#!/usr/bin/python3
"""DeepSpeed config keys and engine arguments that ds.initialize honours
(test/Python/engine-config-keys.test).

Modes:
  autocast   fp16.auto_cast: the float inputs are rounded to fp16 before the
             forward pass. A LayerNorm reading the input (an f32 island)
             makes it visible in the loss: with auto_cast ds's first loss
             equals torch's on the fp16-rounded input, without it torch's
             on the f32 input (each within 1e-5 absolute: f32 LayerNorm
             sums in another order), and the two differ by more than 1e-4,
             so either check can fail.
  save16     save_16bit_model and save_checkpoint with
             stage3_gather_16bit_weights_on_model_save (fp16, 3 steps; with
             mpirun -np 2 ZeRO-3; the first block frozen, partitioned at
             ZeRO-3 like the rest): every tensor of the user's module, whole,
             fp16, exactly the trained f32 weights rounded (the frozen ones
             the initial weights rounded); loadable by
             load_state_dict after .float(), whose loss is within 1e-3
             X; without the key under ZeRO-3
             nothing is written.
  sched      torch lr_schedulers passed to ds.initialize (LambdaLR, StepLR,
             CosineAnnealingLR, OneCycleLR without momentum cycling) on a
             torch Adam: each step's lr equal to a pure PyTorch loop's
             (1e-12 relative) and each loss within 1e-5 relative; StepLR
             with gradient accumulation 2 steps once per update.
  errors     what is refused, one clear error each.
"""
import copy
import os
import sys
import tempfile

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engine_parity as ep  # noqa: E402

import ds  # noqa: E402

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
WORLD = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))


class LayerNormLoss(nn.Module):
    """mean(LayerNorm(x)): the LayerNorm (an f32 island under fp16) reads
    the input itself."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(4)
        with torch.no_grad():
            self.ln.weight.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))

    def forward(self, x):
        return self.ln(x).mean()


def mode_autocast():
    x = torch.tensor([[8.0031, 1.0, 2.0, 15.9961],
                      [0.5002, 1.7001, 2.9003, 8.0035]])
    model = LayerNormLoss()
    with torch.no_grad():
        rounded = float(model(x.half().float()))
        plain = float(model(x))
    ok = abs(rounded - plain) > 1e-4
    print("torch: f32 input %.7f, fp16-rounded input %.7f, apart %.2e" %
          (plain, rounded, abs(rounded - plain)))
    for cast, want in ((True, rounded), (False, plain)):
        cfg = {"train_micro_batch_size_per_gpu": 2,
               "optimizer": {"type": "SGD", "params": {"lr": 1e-3}},
               "fp16": {"enabled": True, "auto_cast": cast,
                        "initial_scale_power": 4}}
        engine, _, _, _ = ds.initialize(model=copy.deepcopy(model),
                                        config=cfg)
        loss = engine(x=x)
        engine.backward(loss)
        engine.step()
        err = abs(float(loss) - want)
        good = err <= 1e-5
        ok &= good
        print("auto_cast %s: ds %.7f torch %.7f abs %.2e %s" % (
            str(cast).lower(), float(loss), want, err,
            "ok" if good else "FAIL (tolerance 1e-5)"))
    return ok


def mode_save16(folder):
    model, (vocab, rows, seq) = ep.new_model()
    # The first block frozen: under ZeRO-3 its weights (and the causal-mask
    # buffers) are partitioned like the trained ones and saved whole.
    frozen = [n for n, p in model.named_parameters() if ".h.0." in n]
    for n, p in model.named_parameters():
        p.requires_grad_(n not in frozen)
    initial = copy.deepcopy(model.state_dict())
    part = rows // WORLD
    mine = slice(RANK * part, (RANK + 1) * part)
    data = ep.batches(vocab, rows, seq, 3)
    zero = {"stage": 3 if WORLD > 1 else 1,
            "stage3_gather_16bit_weights_on_model_save": True}
    cfg = {"train_batch_size": rows, "train_micro_batch_size_per_gpu": part,
           "optimizer": {"type": "Adam", "params": {"lr": 2e-3}},
           "fp16": {"enabled": True, "initial_scale_power": 8},
           "zero_optimization": zero}
    engine, _, _, _ = ds.initialize(model=model, config=cfg)
    ep.ds_losses(engine, data, rows=mine)
    assert engine.save_16bit_model(folder) is True
    engine.save_checkpoint(folder, tag="t3")
    trained = {k: v.clone() for k, v in engine.module.state_dict().items()}
    saved = torch.load(os.path.join(folder, "pytorch_model.bin"))
    in_ckpt = torch.load(os.path.join(folder, "t3", "pytorch_model.bin"))
    ok = list(saved) == list(initial)
    worst, moved = 0.0, 0.0
    for k, v in saved.items():
        ok &= v.dtype == torch.float16 and v.shape == initial[k].shape
        worst = max(worst, float((v.float() -
                                  trained[k].half().float()).abs().max()))
        moved = max(moved, float((trained[k] - initial[k]).abs().max()))
        ok &= torch.equal(v, in_ckpt[k])
        if k in frozen:  # unchanged by training: the initial one rounded
            ok &= torch.equal(v, initial[k].half())
    print("rank %d (ZeRO stage %d, %d rank(s)): %d tensors (%d frozen), fp16, "
          "whole shapes, the checkpoint's copy identical: %s; against the f32 "
          "weights rounded: largest difference %g; training moved them by "
          "%.2e" % (RANK, engine.zero_optimization_stage(), WORLD,
                    len(saved), len(frozen), "ok" if ok else "FAIL", worst,
                    moved))
    ok &= worst == 0.0 and moved > 1e-4
    fresh = ep.new_model()[0]
    fresh.load_state_dict({k: v.float() for k, v in saved.items()})
    probe = ep.batches(vocab, rows, seq, 1, seed=99)[0]
    with torch.no_grad():
        theirs = float(fresh(**probe))
    mine_loss = float(engine.eval_batch(iter([
        {k: v[mine] for k, v in probe.items()}]), num_micro_batches=1))
    ok &= ep.check("rank %d loaded 16-bit model's loss" % RANK, theirs,
                   mine_loss, 1e-3)
    if WORLD > 1:
        off = dict(cfg, zero_optimization={"stage": 3})
        other, _, _, _ = ds.initialize(model=ep.new_model()[0], config=off)
        ep.ds_losses(other, data[:1], rows=mine)
        where = os.path.join(folder, "off")
        wrote = other.save_16bit_model(where)
        ok &= wrote is False and not os.path.exists(where)
        print("rank %d without the key under ZeRO-3: returned %s, wrote %s" %
              (RANK, wrote, os.path.exists(where)))
    return ok


SCHEDULERS = {
    "LambdaLR": lambda o: torch.optim.lr_scheduler.LambdaLR(
        o, lambda s: 1.0 / (1.0 + s)),
    "StepLR": lambda o: torch.optim.lr_scheduler.StepLR(o, 2, gamma=0.5),
    "CosineAnnealingLR": lambda o:
        torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=6, eta_min=1e-4),
    "OneCycleLR": lambda o: torch.optim.lr_scheduler.OneCycleLR(
        o, max_lr=4e-3, total_steps=6, cycle_momentum=False),
}


def mode_sched():
    ok = True
    for name, make in SCHEDULERS.items():
        model, (vocab, rows, seq) = ep.new_model()
        ref = copy.deepcopy(model)
        data = ep.batches(vocab, rows, seq, ep.STEPS)
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)
        sched = make(opt)
        engine, _, _, got_sched = ds.initialize(
            model=model, optimizer=opt, lr_scheduler=sched,
            config={"train_micro_batch_size_per_gpu": rows})
        ok &= got_sched is sched
        ref_opt = torch.optim.Adam(ref.parameters(), lr=2e-3)
        ref_sched = make(ref_opt)
        worst_lr, worst_loss = 0.0, 0.0
        lrs = []
        for b in data:
            lr_ds, lr_torch = engine.get_lr()[0], ref_sched.get_last_lr()[0]
            lrs.append(lr_ds)
            worst_lr = max(worst_lr, ep.rel(lr_ds, lr_torch))
            loss = engine(**b)
            engine.backward(loss)
            engine.step()
            ref_opt.zero_grad()
            want = ref(**b)
            want.backward()
            ref_opt.step()
            ref_sched.step()
            worst_loss = max(worst_loss, ep.rel(float(loss), float(want)))
        good = worst_lr <= 1e-12 and worst_loss <= 1e-5 and \
            len(set(lrs)) > 1
        ok &= good
        print("%s: lrs %s; lr rel %.1e, loss rel %.2e %s" % (
            name, " ".join("%.6g" % x for x in lrs), worst_lr, worst_loss,
            "ok" if good else "FAIL (tolerances 1e-12, 1e-5)"))
    return accumulated() and ok


def accumulated():
    """StepLR(1, 0.5) with gradient accumulation 2: the scheduler steps once
    per update (every second micro-batch), as DeepSpeed steps it; each
    micro-batch's loss against torch accumulating loss / 2."""
    model, (vocab, rows, seq) = ep.new_model()
    ref = copy.deepcopy(model)
    data = ep.batches(vocab, rows, seq, 2 * ep.STEPS)

    def make(o):
        return torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.5)

    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    engine, _, _, _ = ds.initialize(
        model=model, optimizer=opt, lr_scheduler=make(opt),
        config={"train_micro_batch_size_per_gpu": rows,
                "gradient_accumulation_steps": 2})
    ref_opt = torch.optim.Adam(ref.parameters(), lr=2e-3)
    ref_sched = make(ref_opt)
    lrs, worst = [], 0.0
    for i, b in enumerate(data):
        lrs.append(engine.get_lr()[0])
        loss = engine(**b)
        engine.backward(loss)
        engine.step()
        if i % 2 == 0:
            ref_opt.zero_grad()
        want = ref(**b)
        (want / 2).backward()
        if i % 2 == 1:
            ref_opt.step()
            ref_sched.step()
        worst = max(worst, ep.rel(float(loss), float(want)))
    good = lrs == [2e-3 * 0.5 ** (i // 2) for i in range(len(data))] and \
        worst <= 1e-5 and engine.global_steps == ep.STEPS
    print("StepLR, accumulation 2: lrs %s; loss rel %.2e %s" % (
        " ".join("%.6g" % x for x in lrs), worst,
        "ok" if good else "FAIL (tolerance 1e-5)"))
    return good


def mode_errors():
    model, (vocab, rows, seq) = ep.new_model()
    cfg = {"train_micro_batch_size_per_gpu": rows}

    def adam():
        return torch.optim.Adam(model.parameters(), lr=1e-3)

    def two_lrs():
        o = torch.optim.Adam([{"params": [model.gpt.wte.weight], "lr": 1e-3},
                              {"params": [model.gpt.ln_f.weight],
                               "lr": 2e-3}])
        return o, torch.optim.lr_scheduler.StepLR(o, 2)

    o1, o2 = adam(), adam()
    tries = [
        ("momentum", lambda: ds.initialize(
            model=model, optimizer=o1, config=cfg,
            lr_scheduler=torch.optim.lr_scheduler.OneCycleLR(
                o1, max_lr=1e-2, total_steps=6))),
        ("other", lambda: ds.initialize(
            model=model, optimizer=adam(), config=cfg,
            lr_scheduler=torch.optim.lr_scheduler.StepLR(o2, 2))),
        ("nooptimizer", lambda: ds.initialize(
            model=model, config=dict(cfg, optimizer={"type": "Adam"}),
            lr_scheduler=torch.optim.lr_scheduler.StepLR(adam(), 2))),
        ("twolrs", lambda: ds.initialize(
            model=model, optimizer=two_lrs()[0], config=cfg,
            lr_scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 2))),
        ("both", lambda: ds.initialize(
            model=model, optimizer=o1, lr_scheduler=lambda o:
            torch.optim.lr_scheduler.StepLR(o, 2), config=dict(
                cfg, scheduler={"type": "WarmupLR"}))),
    ]
    ep.report_errors(tries)
    return True


def main():
    mode = sys.argv[1]
    if len(sys.argv) > 2 and mode != "save16":
        sys.stdout = open("%s.%d" % (sys.argv[2], RANK), "w")
    if mode == "save16":
        folder = sys.argv[2]
        sys.stdout = open("%s.%d.log" % (folder, RANK), "w")
        ok = mode_save16(folder)
    else:
        ok = {"autocast": mode_autocast, "sched": mode_sched,
              "errors": mode_errors}[mode]()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
