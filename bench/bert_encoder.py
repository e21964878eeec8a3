#!/usr/bin/python3
"""A BERT-style encoder for bench/step_vs_torch.py: token and position
embeddings, post-LayerNorm blocks (bidirectional multi-head attention with
an additive padding mask, GELU MLP), a tied token head and cross-entropy
over every position (a masked-LM-shaped loss without the masking draw).

The padding mask is a float input `keep` of shape [batch, seq] (1 keeps a
key position, 0 pads it); attention adds (keep - 1) * 10000 to the scores,
as BERT does. `build()` returns the model and its inputs, sequence b of the
batch padded after seq - b * seq / (2 * batch) tokens.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# vocab, layers, heads, d_model, batch, seq
SIZE = (1024, 4, 4, 256, 4, 128)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x, bias):
        B, T, C = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, h, C // h).transpose(1, 2)
        k = k.view(B, T, h, C // h).transpose(1, 2)
        v = v.view(B, T, h, C // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // h)) + bias
        y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = self.ln1(x + self.proj(y))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Bert(nn.Module):
    def __init__(self, vocab, layers, heads, d, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])

    def forward(self, tokens, keep, labels):
        x = self.ln(self.tok(tokens) + self.pos)
        bias = ((keep - 1.0) * 10000.0).unsqueeze(1).unsqueeze(2)
        for b in self.blocks:
            x = b(x, bias)
        logits = x @ self.tok.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               labels.reshape(-1))


def build(seed=0):
    vocab, layers, heads, d, batch, seq = SIZE
    torch.manual_seed(seed)
    model = Bert(vocab, layers, heads, d, seq)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, vocab, (batch, seq), generator=g)
    labels = torch.randint(0, vocab, (batch, seq), generator=g)
    keep = torch.ones(batch, seq)
    for b in range(batch):
        keep[b, seq - b * seq // (2 * batch):] = 0.0
    return model, {"tokens": tokens, "keep": keep, "labels": labels}
