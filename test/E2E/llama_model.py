#!/usr/bin/python3
"""A Llama-shaped model: RMSNorm, rotary embeddings on Q and K, separate
Q/K/V/O projections without biases, causal attention, a SwiGLU MLP and an
untied output layer; exported for ds with its training data.

    llama_model.py OUT.onnx DATA.npz
"""
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, d, heads, t):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.gate = nn.Linear(d, 3 * d, bias=False)
        self.up = nn.Linear(d, 3 * d, bias=False)
        self.down = nn.Linear(3 * d, d, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        f = torch.outer(torch.arange(t).float(), inv)
        emb = torch.cat((f, f), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)
        self.register_buffer("mask", torch.tril(torch.ones(t, t)).view(1, 1, t, t), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        q = q * self.cos + rotate_half(q) * self.sin
        k = k * self.cos + rotate_half(k) * self.sin
        att = (q @ k.transpose(-2, -1)) / (self.hd ** 0.5)
        att = att.masked_fill(self.mask == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self, vocab=128, d=64, heads=4, layers=2, t=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, heads, t) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.embed(idx)
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    torch.manual_seed(0)
    model = Model()
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 128, (2, 16), generator=g)
    targets = torch.randint(0, 128, (2, 16), generator=g)
    torch.onnx.export(model, (idx, targets), sys.argv[1],
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=["idx", "targets"], output_names=["loss"])
    np.savez(sys.argv[2], idx=torch.randint(0, 128, (8, 16), generator=g).numpy(),
             targets=torch.randint(0, 128, (8, 16), generator=g).numpy())


if __name__ == "__main__":
    main()
