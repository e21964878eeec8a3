#!/usr/bin/python3
"""A DeepSpeed training script, unchanged but for the import: ds compiles
the step ahead of time (docs/python.md).

    PYTHONPATH=python /usr/bin/python3 examples/python/train_gpt.py \
        --deepspeed_config examples/python/ds_config.json
    mpirun -np 2 env PYTHONPATH=python /usr/bin/python3 \
        examples/python/train_gpt.py --deepspeed_config examples/python/ds_config.json

The model is the tiny GPT of examples/gpt (its forward returns the loss),
the data the token windows of examples/gpt/train.npz.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import torch

import ds as deepspeed

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpt"))
import export_gpt  # noqa: E402


class GPTLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        vocab, block, layers, heads, d, _, _ = export_gpt.SIZES["tiny"]
        self.gpt = export_gpt.GPT(vocab, block, layers, heads, d)

    def forward(self, idx, targets):
        return self.gpt(idx, targets)[1]


class Windows(torch.utils.data.Dataset):
    def __init__(self, path):
        data = np.load(path)
        self.idx = torch.from_numpy(data["idx"])
        self.targets = torch.from_numpy(data["targets"])

    def __len__(self):
        return len(self.idx)

    def __getitem__(self, i):
        return {"idx": self.idx[i], "targets": self.targets[i]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--save", default=None,
                        help="checkpoint folder (default: $TMPDIR/ds-example-UID)")
    parser.add_argument("--local_rank", type=int, default=0)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = GPTLoss()
    data = Windows(os.path.join(HERE, "..", "gpt", "train.npz"))
    engine, optimizer, loader, scheduler = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(),
        training_data=data)

    for epoch in range(args.epochs):
        for batch in loader:
            loss = engine(**batch)
            engine.backward(loss)
            engine.step()
            boundary = engine.micro_steps % \
                engine.gradient_accumulation_steps() == 0
            if boundary and engine.global_rank == 0:
                print("step %d loss %.4f lr %.6f" % (
                    engine.global_steps, loss.item(), scheduler.get_lr()[0]))

    # One folder for every rank (rank 0 writes `latest`).
    save = args.save or os.path.join(tempfile.gettempdir(),
                                     "ds-example-%d" % os.getuid())
    engine.save_checkpoint(save)
    path, _ = engine.load_checkpoint(save)
    if engine.global_rank == 0:
        print("trained %d steps (ZeRO stage %d, %d rank(s)); checkpoint %s" % (
            engine.global_steps, engine.zero_optimization_stage(),
            engine.world_size, path))


if __name__ == "__main__":
    main()
