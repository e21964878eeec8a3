"""A Llama-2-style decoder for examples/gpt/export_gpt.py (--size llama-*).

Pre-norm blocks with RMSNorm, rotary position embeddings on Q and K,
grouped-query attention (each key/value head serves heads/kv_heads query
heads), a SwiGLU MLP (down(silu(gate(x)) * up(x))), no biases, and an
untied output layer, as in Llama 2. What is simplified against Meta's
code: the rotary tables, the causal mask and the attention are computed in
the model's float type (no complex numbers: rotate-half, as in Hugging
Face's port), the key/value heads are repeated with expand + reshape
before an ordinary attention (no fused kernel, no KV cache), and the
loss is torch's cross entropy over every position.

The rotary tables and the causal mask are buffers registered once on the
model (not per layer) and sliced to the sequence length; they are float, so
that a shapes-only export (examples/gpt/shapes_only.py) can leave them
without data like the weights.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    # name: (vocab, block, layers, heads, kv_heads, d_model, ffn, batch, seq)
    "llama-tiny": (128, 32, 2, 4, 2, 64, 176, 4, 32),
    "llama2-7b": (32000, 4096, 32, 32, 32, 4096, 11008, 1, 4096),
    "llama2-70b": (32000, 4096, 80, 64, 8, 8192, 28672, 1, 4096),
}


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5, device=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d, device=device))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, d, heads, kv_heads, device=None):
        super().__init__()
        assert d % heads == 0 and heads % kv_heads == 0
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, d, bias=False, device=device)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=False, device=device)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=False, device=device)
        self.o_proj = nn.Linear(d, d, bias=False, device=device)

    def repeat_kv(self, x):
        """[B, kv, T, hd] -> [B, heads, T, hd]: each key/value head serves
        heads/kv_heads consecutive query heads."""
        rep = self.heads // self.kv_heads
        if rep == 1:
            return x
        B, kv, T, hd = x.shape
        return x[:, :, None].expand(B, kv, rep, T, hd).reshape(B, kv * rep, T, hd)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = self.repeat_kv(k), self.repeat_kv(v)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        att = att.masked_fill(mask == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, d, ffn, device=None):
        super().__init__()
        self.gate_proj = nn.Linear(d, ffn, bias=False, device=device)
        self.up_proj = nn.Linear(d, ffn, bias=False, device=device)
        self.down_proj = nn.Linear(ffn, d, bias=False, device=device)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn, device=None):
        super().__init__()
        self.input_layernorm = RMSNorm(d, device=device)
        self.self_attn = Attention(d, heads, kv_heads, device)
        self.post_attention_layernorm = RMSNorm(d, device=device)
        self.mlp = MLP(d, ffn, device)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, vocab, block, layers, heads, kv_heads, d, ffn,
                 device=None):
        super().__init__()
        hd = d // heads
        self.embed_tokens = nn.Embedding(vocab, d, device=device)
        self.layers = nn.ModuleList(
            Block(d, heads, kv_heads, ffn, device) for _ in range(layers))
        self.norm = RMSNorm(d, device=device)
        self.lm_head = nn.Linear(d, vocab, bias=False, device=device)
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=device).float() / hd))
        f = torch.outer(torch.arange(block, device=device).float(), inv)
        emb = torch.cat((f, f), dim=-1)
        self.register_buffer("rope_cos", emb.cos()[None, None])
        self.register_buffer("rope_sin", emb.sin()[None, None])
        self.register_buffer(
            "mask", torch.tril(torch.ones(block, block, device=device)).view(1, 1, block, block))
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.size()
        cos, sin = self.rope_cos[:, :, :T], self.rope_sin[:, :, :T]
        mask = self.mask[:, :, :T, :T]
        x = self.embed_tokens(idx)
        for blk in self.layers:
            x = blk(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))
        loss = F.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-100)
        return logits, loss


def build(size, seed=0, device=None):
    """(model, idx, targets) of a Llama size; inputs on `device` too."""
    vocab, block, layers, heads, kv_heads, d, ffn, batch, seq = SIZES[size]
    torch.manual_seed(seed)
    model = Llama(vocab, block, layers, heads, kv_heads, d, ffn, device)
    g = torch.Generator().manual_seed(seed + 1)
    idx = torch.randint(0, vocab, (batch, seq), generator=g)
    targets = torch.randint(0, vocab, (batch, seq), generator=g)
    return model, idx.to(device or "cpu"), targets.to(device or "cpu")
