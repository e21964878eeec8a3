#!/usr/bin/python3
"""Builds a small BERT-style encoder in PyTorch and exports it for ds.

A bidirectional encoder (token and position embeddings, post-norm blocks
as in BERT, GELU MLP) with a padding mask: input `mask` is 1 for a real
token and 0 for padding, and every attention score of a padded key gets
-10000 before the softmax (BERT's extended attention mask). The loss is a
masked-language-model cross entropy over `targets`, where -100 marks a
position without a target (padding and unmasked tokens).

The export follows export_gpt.py (TrainingMode.TRAINING, no constant
folding, opset 17, ds.export's record in the metadata), so `ds-opt
--optimizer=adam` compiles a training plan of it.

    /usr/bin/python3 examples/bert/export_bert.py --size small -o /tmp/bert.onnx \
        --data /tmp/bert.npz

`--data` writes one batch (ids, mask, targets) whose rows have different
lengths (the rest padded), for ds-run --data. The inputs' batch dimension
is dynamic, so `--input-shape=ids:BxT` picks the micro-batch.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# ds.export's record of the trainable parameters and buffers, as the GPT
# example adds it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpt"))
from export_gpt import record  # noqa: E402

SIZES = {
    # name: (vocab, max_len, layers, heads, d_model, batch, seq)
    "tiny": (128, 32, 2, 4, 64, 4, 32),
    "small": (1024, 128, 4, 4, 128, 4, 64),
    "base": (30522, 512, 12, 12, 768, 8, 128),
}


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, bias):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        hs = C // self.heads
        q = q.view(B, T, self.heads, hs).transpose(1, 2)
        k = k.view(B, T, self.heads, hs).transpose(1, 2)
        v = v.view(B, T, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs)) + bias
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.out(y)


class Layer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.attn = SelfAttention(d, heads)
        self.ln_1 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.ln_2 = nn.LayerNorm(d)

    def forward(self, x, bias):
        x = self.ln_1(x + self.attn(x, bias))
        return self.ln_2(x + self.mlp(x))


class Bert(nn.Module):
    def __init__(self, vocab, max_len, layers, heads, d):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, d)
        self.head_ln = nn.LayerNorm(d)
        self.decoder = nn.Linear(d, vocab)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, ids, mask, targets):
        B, T = ids.size()
        pos = torch.arange(0, T, dtype=torch.long, device=ids.device)
        x = self.ln(self.tok(ids) + self.pos(pos))
        # [B, 1, 1, T]: 0 for a real key, -10000 for padding.
        bias = (1.0 - mask.to(x.dtype)).unsqueeze(1).unsqueeze(2) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        logits = self.decoder(self.head_ln(F.gelu(self.head(x))))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                               ignore_index=-100)
        return logits, loss


def batch(vocab, rows, seq, seed):
    """Rows of different lengths: ids padded with 0, mask 1 on real tokens,
    targets the original token at a sixth of the real positions, else -100."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (rows, seq), generator=g)
    lengths = torch.randint(seq // 2, seq + 1, (rows,), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).to(torch.int64)
    ids = ids * mask
    pick = (torch.rand(rows, seq, generator=g) < 1 / 6) & (mask == 1)
    pick[:, 0] = True  # every row has a target
    targets = torch.where(pick, ids, torch.full_like(ids, -100))
    return ids, mask, targets


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("-o", "--output", required=True, help="output .onnx")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=None,
                    help="also write one batch (ids, mask, targets) of --rows rows to this .npz")
    ap.add_argument("--rows", type=int, default=None,
                    help="rows of --data (default: the size's batch)")
    ap.add_argument("--print-loss", action="store_true",
                    help="print torch's loss on the --data batch (for tests)")
    args = ap.parse_args()
    vocab, max_len, layers, heads, d, rows, seq = SIZES[args.size]
    torch.manual_seed(args.seed)
    model = Bert(vocab, max_len, layers, heads, d)
    ids, mask, targets = batch(vocab, rows, seq, args.seed + 1)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"exporting bert {args.size}: {nparams} parameters, inputs {tuple(ids.shape)} "
          f"-> {args.output}", file=sys.stderr)
    axes = {0: "batch"}
    torch.onnx.export(
        model, (ids, mask, targets), args.output,
        training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
        opset_version=17, input_names=["ids", "mask", "targets"],
        output_names=["logits", "loss"],
        dynamic_axes={"ids": axes, "mask": axes, "targets": axes})
    record(model, args.output)
    if args.data:
        import numpy as np
        ids, mask, targets = batch(vocab, args.rows or rows, seq, args.seed + 1)
        np.savez(args.data, ids=ids.numpy(), mask=mask.numpy(), targets=targets.numpy())
        if args.print_loss:
            with torch.no_grad():
                print(f"torch loss {model(ids, mask, targets)[1].item():.6f}")


if __name__ == "__main__":
    main()
