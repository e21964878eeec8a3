#!/usr/bin/python3
"""A small transformer with separate Q, K and V projections (as Hugging
Face's BERT and Llama write attention), a gated SiLU MLP without biases
(Llama's down(silu(gate(x)) * up(x))), and a language-model loss, exported
for ds with its training data.

    qkv_model.py OUT.onnx DATA.npz
"""
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.gate = nn.Linear(d, 4 * d, bias=False)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        mask = torch.tril(torch.ones(t, t)).view(1, 1, t, t)
        att = att.masked_fill(mask == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(y)
        h = self.ln2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    torch.manual_seed(0)
    model = Model()
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 64, (4, 16), generator=g)
    targets = torch.randint(0, 64, (4, 16), generator=g)
    torch.onnx.export(model, (idx, targets), sys.argv[1],
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=["idx", "targets"], output_names=["loss"])
    data_idx = torch.randint(0, 64, (12, 16), generator=g)
    data_targets = torch.randint(0, 64, (12, 16), generator=g)
    np.savez(sys.argv[2], idx=data_idx.numpy(), targets=data_targets.numpy())


if __name__ == "__main__":
    main()
