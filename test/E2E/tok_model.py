#!/usr/bin/python3
"""Token classifier on flat tokens: an embedding looked up by token ids,
an MLP block (Gemm with bias: 2-D input), and an output layer with its own
bias (a Gemm with trans_b and C), softmax cross entropy with ignored
labels; exported for ds with its data.

    tok_model.py OUT.onnx DATA.npz [VOCAB]   (VOCAB: 96 by default)
"""
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, vocab=96, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids, labels):
        x = self.emb(ids)
        x = x + self.down(F.gelu(self.up(x)))
        return F.cross_entropy(self.head(self.ln(x)), labels, ignore_index=-1)


def main():
    vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 96
    torch.manual_seed(0)
    model = Model(vocab)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (24,), generator=g)
    labels = torch.randint(0, vocab, (24,), generator=g)
    torch.onnx.export(model, (ids, labels), sys.argv[1],
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=["ids", "labels"], output_names=["loss"])
    ids = torch.randint(0, vocab, (120,), generator=g)
    labels = torch.randint(0, vocab, (120,), generator=g)
    labels[::7] = -1  # ignored positions
    np.savez(sys.argv[2], ids=ids.numpy(), labels=labels.numpy())


if __name__ == "__main__":
    main()
