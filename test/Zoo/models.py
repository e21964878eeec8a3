"""The test model zoo: small versions of the models people train, built from
torch and torchvision code, each wrapped so that `model(**inputs)` returns
the scalar training loss (what `ds.export` expects).

`ZOO[name]()` returns `(model, inputs)` with fixed seeds, so the same call
gives the same weights and batch on every run.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import BasicBlock


class Classify(nn.Module):
    """Cross entropy of `net(x)` against `y`."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, y):
        return F.cross_entropy(self.net(x), y)


class SmallResNet18(torchvision.models.ResNet):
    """torchvision's ResNet-18 (BasicBlock, [2, 2, 2, 2]) with widths
    8-16-32-64 instead of 64-128-256-512, for 32x32 images."""

    def __init__(self, num_classes=10):
        super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=num_classes)
        self.inplanes = 8
        self.conv1 = nn.Conv2d(3, 8, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.layer1 = self._make_layer(BasicBlock, 8, 2)
        self.layer2 = self._make_layer(BasicBlock, 16, 2, stride=2)
        self.layer3 = self._make_layer(BasicBlock, 32, 2, stride=2)
        self.layer4 = self._make_layer(BasicBlock, 64, 2, stride=2)
        self.fc = nn.Linear(64, num_classes)


class SmallUNet(nn.Module):
    """Two down and two up levels: Conv + BatchNorm + ReLU, MaxPool, a
    ConvTranspose up-sampling, a bilinear Resize, concatenated skips, and a
    per-pixel cross entropy."""

    @staticmethod
    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1),
                             nn.BatchNorm2d(cout), nn.ReLU())

    def __init__(self, classes=3):
        super().__init__()
        self.down1, self.down2 = self.block(3, 8), self.block(8, 16)
        self.bottom = self.block(16, 16)
        self.up2 = nn.ConvTranspose2d(16, 16, 2, stride=2)
        self.dec2 = self.block(32, 8)
        self.dec1 = self.block(16, 8)
        self.out = nn.Conv2d(8, classes, 1)

    def forward(self, x, y):
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        b = self.bottom(F.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], dim=1))
        u1 = F.interpolate(u2, scale_factor=2, mode="bilinear",
                           align_corners=False)
        u1 = self.dec1(torch.cat([u1, d1], dim=1))
        return F.cross_entropy(self.out(u1), y)


class LstmLM(nn.Module):
    """Embedding, a 2-layer batch-first LSTM, a linear head over the
    vocabulary. (torch 1.13 cannot export an LSTM's inter-layer dropout in
    training mode, so there is none.)"""

    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, num_layers=2, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, labels):
        h, _ = self.lstm(self.emb(tokens))
        logits = self.head(h)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               labels.reshape(-1))


class GruClassifier(nn.Module):
    """A bidirectional GRU over embeddings, from given initial states; the
    last step of both directions classified."""

    def __init__(self, vocab=40, dim=12, classes=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, dim, num_layers=1, batch_first=True,
                          bidirectional=True)
        self.head = nn.Linear(2 * dim, classes)

    def forward(self, tokens, h0, labels):
        out, _ = self.gru(self.emb(tokens), h0)
        return F.cross_entropy(self.head(out[:, -1]), labels)


class FineTune(nn.Module):
    """The usual fine-tuning case: a frozen backbone, a padding_idx
    embedding, a registered float buffer (a sinusoidal position table) and a
    trainable head."""

    def __init__(self, vocab=30, dim=16, seq=8, classes=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        pos = torch.arange(seq, dtype=torch.float32)[:, None]
        freq = torch.exp(-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        table = torch.zeros(seq, dim)
        table[:, 0::2] = torch.sin(pos * freq)
        table[:, 1::2] = torch.cos(pos * freq)
        self.register_buffer("pos", table)
        self.backbone = nn.Sequential(nn.Linear(dim, dim), nn.GELU(),
                                      nn.LayerNorm(dim))
        for p in self.backbone.parameters():
            p.requires_grad_(False)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens, labels):
        h = self.backbone(self.emb(tokens) + self.pos)
        return F.cross_entropy(self.head(h.mean(dim=1)), labels)


class BagClassifier(nn.Module):
    """nn.EmbeddingBag with an offsets input (bags of run-time lengths), in
    its three modes over one batch of bags: sum with per_sample_weights,
    mean and max, concatenated into a two-layer tanh MLP head (wide enough
    that recomputing its activations lowers the peak)."""

    def __init__(self, vocab=40, dim=8, hidden=256, classes=4):
        super().__init__()
        self.bag_sum = nn.EmbeddingBag(vocab, dim, mode="sum")
        self.bag_mean = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.bag_max = nn.EmbeddingBag(vocab, dim, mode="max")
        self.head = nn.Sequential(nn.Linear(3 * dim, hidden), nn.Tanh(),
                                  nn.Linear(hidden, hidden), nn.Tanh(),
                                  nn.Linear(hidden, classes))

    def forward(self, idx, offsets, weights, labels):
        h = torch.cat([self.bag_sum(idx, offsets, per_sample_weights=weights),
                       self.bag_mean(idx, offsets),
                       self.bag_max(idx, offsets)], dim=1)
        return F.cross_entropy(self.head(torch.tanh(h)), labels)


def _images(batch, size=32, classes=10):
    return {"x": torch.randn(batch, 3, size, size),
            "y": torch.randint(0, classes, (batch,))}


def resnet18():
    torch.manual_seed(0)
    # At batch 16, 64 px torch's own f32 losses agree with its f64 ones
    # within 3e-7 over 6 steps; at batch 8 (and at 96-128 px) valid f32
    # orders of the same sums drift apart by 1e-4 to 1e-2
    # (test/Zoo/zoo-parity.test).
    return Classify(SmallResNet18()), _images(16, size=64)


def mobilenet_v2():
    torch.manual_seed(0)
    # torchvision's MobileNetV2 (x0.25) with its first four stages of
    # inverted residuals (depthwise 3x3, ReLU6, linear bottlenecks, skip
    # adds) at 32 px, batch 16. The whole 17-block network at these sizes is
    # chaotic over 6 steps in f32 itself (torch's f32 losses differ from its
    # f64 ones by 1.9e-2 with Adam): no f32 implementation can hold 1e-4
    # against another there. This depth is well conditioned: torch's f32
    # and f64 losses agree within 1.3e-7 (test/Zoo/zoo-parity.test).
    net = torchvision.models.mobilenet_v2(
        width_mult=0.25, num_classes=10,
        inverted_residual_setting=[[1, 16, 1, 1], [6, 24, 2, 2],
                                   [6, 32, 2, 2], [6, 64, 1, 2]])
    return Classify(net), _images(16, size=32)


def unet():
    torch.manual_seed(0)
    return SmallUNet(), {"x": torch.randn(2, 3, 16, 16),
                         "y": torch.randint(0, 3, (2, 16, 16))}


def vit():
    torch.manual_seed(0)
    net = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2,
        hidden_dim=32, mlp_dim=64, num_classes=10)
    return Classify(net), _images(4)


def lstm_lm():
    torch.manual_seed(0)
    tokens = torch.randint(0, 50, (4, 12))
    return LstmLM(), {"tokens": tokens, "labels": torch.roll(tokens, -1, 1)}


def gru_classifier():
    torch.manual_seed(0)
    return GruClassifier(), {"tokens": torch.randint(0, 40, (4, 10)),
                             "h0": torch.randn(2, 4, 12),
                             "labels": torch.randint(0, 4, (4,))}


def finetune():
    torch.manual_seed(0)
    tokens = torch.randint(0, 30, (4, 8))
    tokens[:, -2:] = 0  # padding
    return FineTune(), {"tokens": tokens, "labels": torch.randint(0, 5, (4,))}


def embedding_bag():
    torch.manual_seed(0)
    # 32 bags over 96 indices, empty ones on each half: the first 16 bags
    # cover indices [0, 48), so the batch splits evenly over 2 ranks (each
    # rank's offsets re-based by ds-run) and the half export is valid.
    lengths = [3, 0, 5, 1, 7, 2, 4, 3, 0, 6, 2, 3, 4, 1, 5, 2] * 2
    return BagClassifier(), {
        "idx": torch.randint(0, 40, (96,)),
        "offsets": torch.tensor([0] + list(np.cumsum(lengths[:-1]))),
        "weights": torch.rand(96),
        "labels": torch.randint(0, 4, (32,))}


# Inputs whose batch is not on axis 0: the GRU's initial state is
# [directions, batch, hidden] (ds-opt records the axis in the plan and
# ds-run splits the data along it; the harness halves the batch along it).
BATCH_AXES = {"gru_classifier": {"h0": 1}}

ZOO = {
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    "unet": unet,
    "vit": vit,
    "lstm_lm": lstm_lm,
    "gru_classifier": gru_classifier,
    "finetune": finetune,
    "embedding_bag": embedding_bag,
}
