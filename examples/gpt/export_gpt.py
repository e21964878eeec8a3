#!/usr/bin/python3
"""Builds a small GPT-style model in PyTorch and exports it for ds.

The export follows what ds expects of a training graph (docs/python.md):
TrainingMode.TRAINING, do_constant_folding=False, opset 17, so that every
parameter is one initializer named as in torch and the loss
(SoftmaxCrossEntropyLoss) is a graph output; ds.export's record of the
trainable parameters and the buffers (the causal masks) is added to the
model's metadata.

    /usr/bin/python3 examples/gpt/export_gpt.py --inputs examples/gpt/inputs.npz \
        --train-data examples/gpt/train.npz     # gpt.onnx, inputs.npz, train.npz (tiny, committed)
    /usr/bin/python3 examples/gpt/export_gpt.py --size gpt2-small -o /tmp/gpt2.onnx
    /usr/bin/python3 examples/gpt/export_gpt.py --size gpt3-175b --shapes-only -o /tmp/gpt3.onnx

The tiny model is what the README's main job compiles; gpt2-small has the
shape of GPT-2 small (12 layers, d=768, 12 heads, vocabulary 50257) and is
not committed (about 500 MB). gpt2-medium/large/xl and gpt3-175b (96
layers, d=12288, 96 heads, sequence 2048) are the GPT-2 and GPT-3 shapes;
llama-tiny, llama2-7b and llama2-70b are Llama-2-style models (llama.py).

--shapes-only writes the training graph with initializers that carry
shapes and no data (shapes_only.py; docs/planner.md "Models without
weights"): the model is built on torch's meta device, so even gpt3-175b
exports in seconds and a few hundred MB of memory. ds-opt plans such a
file; ds-run refuses it.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama  # noqa: E402
import shapes_only  # noqa: E402

SIZES = {
    # name: (vocab, block, layers, heads, d_model, batch, seq)
    "tiny": (128, 32, 2, 4, 64, 4, 32),
    "small": (512, 64, 4, 4, 128, 4, 64),
    "wide": (1024, 128, 4, 8, 384, 4, 128),
    "train": (1024, 128, 4, 8, 256, 4, 128),
    "gpt2-small": (50257, 1024, 12, 12, 768, 1, 128),
    "gpt2-medium": (50257, 1024, 24, 16, 1024, 1, 128),
    "gpt2-large": (50257, 1024, 36, 20, 1280, 1, 128),
    "gpt2-xl": (50257, 1024, 48, 25, 1600, 1, 128),
    "gpt3-175b": (50257, 2048, 96, 96, 12288, 1, 2048),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, block, dropout, device=None):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d, device=device)
        self.c_proj = nn.Linear(d, d, device=device)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.register_buffer(
            "bias", torch.tril(torch.ones(block, block, device=device)).view(1, 1, block, block)
        )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // self.heads
        q = q.view(B, T, self.heads, hs).transpose(1, 2)
        k = k.view(B, T, self.heads, hs).transpose(1, 2)
        v = v.view(B, T, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, d, heads, block, dropout, device=None):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, device=device)
        self.attn = CausalSelfAttention(d, heads, block, dropout, device)
        self.ln_2 = nn.LayerNorm(d, device=device)
        self.mlp = nn.Sequential(
            nn.Linear(d, 4 * d, device=device), nn.GELU(),
            nn.Linear(4 * d, d, device=device), nn.Dropout(dropout)
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, d, dropout=0.0, device=None):
        super().__init__()
        self.wte = nn.Embedding(vocab, d, device=device)
        self.wpe = nn.Embedding(block, d, device=device)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(d, heads, block, dropout, device)
                               for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, device=device)
        self.lm_head = nn.Linear(d, vocab, bias=False, device=device)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-100
        )
        return logits, loss


def build(size, seed=0, dropout=0.0, device=None):
    """(model, idx, targets) of a size; on `device` ("meta": no storage)."""
    if size in llama.SIZES:
        if dropout:
            raise SystemExit("--dropout: the Llama models have no dropout")
        return llama.build(size, seed, device)
    vocab, block, layers, heads, d, batch, seq = SIZES[size]
    torch.manual_seed(seed)
    model = GPT(vocab, block, layers, heads, d, dropout, device)
    g = torch.Generator().manual_seed(seed + 1)
    idx = torch.randint(0, vocab, (batch, seq), generator=g)
    targets = torch.randint(0, vocab, (batch, seq), generator=g)
    return model, idx.to(device or "cpu"), targets.to(device or "cpu")


def load_onnx_weights(model, path):
    """Loads the initializers of the ONNX file at `path` into `model` (the
    tied lm_head takes wte's), so torch and ds start from the same weights."""
    import onnx
    from onnx import numpy_helper
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    state = model.state_dict()
    for name in state:
        state[name] = torch.from_numpy(
            weights["wte.weight" if name == "lm_head.weight" else name].copy())
    model.load_state_dict(state)
    return weights


def export(model, idx, targets, path, dynamic=False, dynamic_batch=False):
    kwargs = {}
    if dynamic or dynamic_batch:
        axes = {0: "batch", 1: "seq"} if dynamic else {0: "batch"}
        kwargs["dynamic_axes"] = {"idx": axes, "targets": axes}
    torch.onnx.export(
        model,
        (idx, targets),
        path,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        opset_version=17,
        input_names=["idx", "targets"],
        output_names=["logits", "loss"],
        **kwargs,
    )
    record(model, path)


def export_shapes_only(model, idx, targets, path):
    """Writes the shapes-only training graph of `model` (on the meta
    device) with ds.export's record."""
    import onnx
    proto = shapes_only.export(model, (idx, targets), ["idx", "targets"],
                               ["logits", "loss"])
    add_record(model, proto)
    onnx.save(proto, path)


def add_record(model, proto):
    """Adds ds.export's record (trainable parameters, buffers) to `proto`:
    the graph has two outputs (logits and the loss), which ds.export itself
    does not take."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "python"))
    import ds
    for key, value in ds.metadata(model, proto).items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value


def record(model, path):
    import onnx
    proto = onnx.load(path)
    add_record(model, proto)
    onnx.save(proto, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES) + sorted(llama.SIZES),
                    default="tiny")
    ap.add_argument("--shapes-only", action="store_true",
                    help="write initializers with shapes and no data "
                         "(metadata ds.shapes_only=1): ds-opt plans the "
                         "file, ds-run refuses it; the model is built on "
                         "the meta device, so no weights are allocated")
    ap.add_argument("-o", "--output", default=None,
                    help="output .onnx (default: gpt.onnx beside this script for tiny)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="dropout probability of the attention, residual and "
                         "embedding dropouts (exported as Dropout nodes)")
    ap.add_argument("--dynamic", action="store_true",
                    help="export batch and sequence as dynamic dimensions")
    ap.add_argument("--dynamic-batch", action="store_true",
                    help="export the batch as a dynamic dimension (a "
                         "config's micro-batch or --input-shape fixes it)")
    ap.add_argument("--npz", default=None,
                    help="also write the inputs and torch's outputs to this .npz")
    ap.add_argument("--inputs", default=None,
                    help="also write the inputs (idx, targets) to this .npz, "
                         "for ds-run --inputs")
    ap.add_argument("--train-data", default=None,
                    help="also write training data to this .npz: --batches "
                         "global batches of --global-batch rows, stacked "
                         "(ds-run --data uses them in turn, each rank its rows)")
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=4)
    args = ap.parse_args()
    out = args.output or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                      "gpt.onnx" if args.size == "tiny" else f"gpt-{args.size}.onnx")
    if args.shapes_only and (args.dynamic or args.dynamic_batch or args.npz
                             or args.inputs or args.train_data):
        ap.error("--shapes-only writes the graph only (static shapes, no "
                 "data files)")
    model, idx, targets = build(args.size, args.seed, args.dropout,
                                "meta" if args.shapes_only else None)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"exporting {args.size}{' (shapes only)' if args.shapes_only else ''}: "
          f"{nparams} parameters, inputs {tuple(idx.shape)} -> {out}",
          file=sys.stderr)
    if args.shapes_only:
        export_shapes_only(model, idx, targets, out)
        return
    export(model, idx, targets, out, args.dynamic, args.dynamic_batch)
    if args.inputs:
        import numpy as np
        np.savez(args.inputs, idx=idx.numpy(), targets=targets.numpy())
    if args.train_data:
        import numpy as np
        vocab = (llama.SIZES[args.size] if args.size in llama.SIZES
                 else SIZES[args.size])[0]
        seq = idx.shape[1]
        g = torch.Generator().manual_seed(args.seed + 1)
        rows = args.global_batch * args.batches
        # A learnable stream: each token follows from the one before it
        # (t' = 3t + 7 mod vocab) from a random start; targets are the
        # inputs shifted by one, so the loss falls well below ln(vocab).
        start = torch.randint(0, vocab, (rows, 1), generator=g)
        tokens = start.expand(rows, seq + 1).clone()
        for i in range(1, seq + 1):
            tokens[:, i] = (3 * tokens[:, i - 1] + 7) % vocab
        np.savez(args.train_data, idx=tokens[:, :-1].numpy(),
                 targets=tokens[:, 1:].numpy())
    if args.npz:
        import numpy as np
        with torch.no_grad():
            logits, loss = model(idx, targets)
        np.savez(args.npz, idx=idx.numpy(), targets=targets.numpy(),
                 logits=logits.numpy(), loss=loss.numpy())


if __name__ == "__main__":
    main()
