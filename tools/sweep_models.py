"""Random small models through vkq: quantize -> compile -> Vulkan, against the CPU reference
(bit for bit where the output is int8-derived, else float rounding) and PT2E's eager output
(cosine >= 0.99), each program run as loaded from its saved .vkq file. The sweep that found
the grouped ConvTranspose2d + BatchNorm crash and the dynamic-shape refusals of 2026-11-23;
run it after changing a pass or a kernel choice:

    .venv/bin/python tools/sweep_models.py --device llvmpipe --family cnn --count 100 --seed 1

Families: cnn (convs, depthwise, residuals, squeeze-excitation, cat, pools, upsampling,
transposed convs, PReLU, six activations; inputs normal, large, tiny, positive or 0-255 images)
temporal (1-D convs, transposed convs, pools and LSTM / GRU / RNN layers) (both: half static, half dynamic or weight-only,
whose convs, pools and batch norms run in float) and transformer (token ids through an embedding,
image patches or float tokens; encoder layers, MultiheadAttention, attention written out with
scaled_dot_product_attention, causal or not, FFNs, LayerNorm/RMSNorm; static, dynamic or
weight-only scheme). Each failure prints one line with the model it drew (rerun
one with --only INDEX); the exit status is the number of failures (0: all agreed). --dynamic
compiles each model once with its batch and sequence/map dims free (torch.export Dims) and checks
it at three sizes; a model that torch.export cannot export so, or that vkq refuses naming the op
and dim (DynamicShapeError), prints a REFUSED line and does not count as a failure.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _act(rng):
    name = str(rng.choice(["relu", "relu6", "hardswish", "identity", "sigmoid", "silu"]))
    return name, {"relu": nn.ReLU, "relu6": nn.ReLU6, "hardswish": nn.Hardswish, "identity": nn.Identity,
                  "sigmoid": nn.Sigmoid, "silu": nn.SiLU}[name]()


class Block(nn.Module):
    """One random 2-D block from c channels; .out is its channel count, .desc what it drew."""
    KINDS = ("conv", "dw", "res", "pool", "avg", "cat", "act", "mul", "se", "up", "convT", "amax")

    def __init__(self, rng, c: int):
        super().__init__()
        self.kind = str(rng.choice(self.KINDS))
        k, s = int(rng.choice([1, 3, 5])), int(rng.choice([1, 1, 2]))
        act_name, act = _act(rng)
        self.desc, self.out = f"{self.kind} k{k} s{s} {act_name}", c
        if self.kind == "conv":
            self.out = int(rng.integers(1, 40))
            self.f = nn.Sequential(nn.Conv2d(c, self.out, k, s, k // 2, dilation=1), nn.BatchNorm2d(self.out), act)
        elif self.kind == "dw":
            self.f = nn.Sequential(nn.Conv2d(c, c, k, s, k // 2, groups=c), nn.BatchNorm2d(c), act)
        elif self.kind == "res":
            self.f, self.a = nn.Sequential(nn.Conv2d(c, c, k, 1, k // 2), nn.BatchNorm2d(c)), act
        elif self.kind == "pool":
            self.f = nn.MaxPool2d(k, s, k // 2) if k > 1 else nn.MaxPool2d(2, 2, ceil_mode=True)
        elif self.kind == "avg":
            self.f = nn.AvgPool2d(max(k, 2), s, k // 2, ceil_mode=bool(rng.random() < 0.5),
                                  count_include_pad=bool(rng.random() < 0.5))
        elif self.kind == "cat":
            self.f = nn.Conv2d(c, int(rng.integers(1, 20)), 1)
            self.out = c + self.f.out_channels
        elif self.kind == "act":
            self.f = act if rng.random() < 0.5 else nn.PReLU(c if rng.random() < 0.7 else 1)
        elif self.kind == "mul":
            self.f = nn.Conv2d(c, c, 1)
        elif self.kind == "se":
            r = max(1, c // 4)
            self.f = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, r, 1), nn.ReLU(), nn.Conv2d(r, c, 1),
                                   nn.Hardsigmoid())
        elif self.kind == "up":
            self.f = nn.Upsample(scale_factor=2, mode=str(rng.choice(["nearest", "bilinear"])))
        elif self.kind == "convT":
            self.out, st, kt = int(rng.integers(1, 20)), int(rng.choice([1, 2, 2, 3])), int(rng.integers(1, 5))
            g = int(rng.choice([1, 2])) if c % 2 == 0 and self.out % 2 == 0 else 1
            self.f = nn.Sequential(nn.ConvTranspose2d(c, self.out, kt, st, int(rng.integers(0, kt)),
                                                      output_padding=int(rng.integers(0, st)), groups=g),
                                   nn.BatchNorm2d(self.out), act)
        else:
            self.f = nn.AdaptiveMaxPool2d(int(rng.choice([1, 2])))
        self.desc += f" {type(self.f).__name__}" if not isinstance(self.f, nn.Sequential) else ""

    def forward(self, x):
        if self.kind == "res":
            return self.a(x + self.f(x))
        if self.kind == "cat":
            return torch.cat([x, self.f(x)], 1)
        if self.kind in ("mul", "se"):
            return x * self.f(x)
        return self.f(x)


class Block1d(nn.Module):
    KINDS = ("conv", "dw", "pool", "avg", "res", "bn", "act", "convT", "rnn")

    def __init__(self, rng, c: int):
        super().__init__()
        self.kind = str(rng.choice(self.KINDS))
        k, s, d = int(rng.choice([1, 2, 3, 4, 5, 7])), int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 2]))
        self.desc, self.out = f"{self.kind}1d k{k} s{s} d{d}", c
        if self.kind == "conv":
            self.out = int(rng.integers(1, 40))
            pad = str(rng.choice(["same", "valid", "number"])) if s == 1 else "number"
            self.f = nn.Sequential(nn.Conv1d(c, self.out, k, s, k // 2 if pad == "number" else pad, dilation=d),
                                   nn.BatchNorm1d(self.out), nn.ReLU())
        elif self.kind == "dw":
            self.f = nn.Sequential(nn.Conv1d(c, c, k, s, k // 2, groups=c), nn.Hardswish())
        elif self.kind == "pool":
            self.f = nn.MaxPool1d(k, s, k // 2, ceil_mode=bool(rng.random() < 0.5)) if k > 1 else nn.Identity()
        elif self.kind == "avg":
            self.f = nn.AvgPool1d(k, s, k // 2, count_include_pad=bool(rng.random() < 0.5)) if k > 1 else nn.Identity()
        elif self.kind == "res":
            self.f = nn.Conv1d(c, c, k, 1, "same")
        elif self.kind == "bn":
            self.f = nn.BatchNorm1d(c)
        elif self.kind == "convT":
            self.out, st = int(rng.integers(1, 24)), int(rng.choice([1, 2, 3]))
            self.f = nn.Sequential(nn.ConvTranspose1d(c, self.out, k, st, int(rng.integers(0, k)),
                                                      output_padding=int(rng.integers(0, st))), nn.ReLU())
        elif self.kind == "rnn":      # over the length, features = channels (passes/unroll_rnn.py)
            cell, h = [nn.LSTM, nn.GRU, nn.RNN][int(rng.integers(0, 3))], int(rng.integers(1, 17))
            layers, bi = int(rng.choice([1, 1, 2])), bool(rng.random() < 0.5)
            self.f = cell(c, h, num_layers=layers, bidirectional=bi, batch_first=True)
            self.out, self.desc = h * (2 if bi else 1), f"{cell.__name__} h{h} x{layers}{' bi' if bi else ''}"
        else:
            self.f = [nn.ReLU(), nn.GELU(), nn.SiLU(), nn.Sigmoid()][int(rng.integers(0, 4))]

    def forward(self, x):
        if self.kind == "rnn":
            return self.f(x.transpose(1, 2))[0].transpose(1, 2)
        return torch.relu(x + self.f(x)) if self.kind == "res" else self.f(x)


def _heads(rng, d: int) -> int:
    return int(rng.choice([h for h in (1, 2, 3, 4) if d % h == 0]))


class SelfAttention(nn.Module):
    """Attention written out as models write it: one qkv linear, heads split by view/transpose,
    scaled_dot_product_attention (causal or not), heads merged, an output linear."""

    def __init__(self, d: int, heads: int, causal: bool):
        super().__init__()
        self.qkv, self.proj, self.h, self.causal = nn.Linear(d, 3 * d), nn.Linear(d, d), heads, causal

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class ManualRMSNorm(nn.Module):
    """RMSNorm as Llama's code writes it."""

    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Parameter(1 + 0.1 * torch.randn(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


class DecoderAttention(nn.Module):
    """A decoder's attention as Llama-style code writes it: rotary position embeddings (halves
    rotated), grouped key/value heads (repeat_interleave), scores by matmul with a causal mask
    (masked_fill with -inf) or scaled_dot_product_attention, a SwiGLU FFN after."""

    def __init__(self, rng, d: int, heads: int):
        super().__init__()
        hd = d // heads
        kv = int(rng.choice([g for g in range(1, heads + 1) if heads % g == 0]))
        self.h, self.kv, self.hd, self.sdpa = heads, kv, hd, bool(rng.random() < 0.5)
        self.q, self.k = nn.Linear(d, d, bias=False), nn.Linear(d, kv * hd, bias=False)
        self.v, self.o = nn.Linear(d, kv * hd, bias=False), nn.Linear(d, d, bias=False)
        self.n1, self.n2 = ManualRMSNorm(d), ManualRMSNorm(d)
        hid = int(rng.integers(4, 64))
        self.gate, self.up, self.down = nn.Linear(d, hid, bias=False), nn.Linear(d, hid, bias=False), \
            nn.Linear(hid, d, bias=False)
        self.rope = hd % 2 == 0
        self.desc = f"h{heads} kv{kv} sdpa{int(self.sdpa)} rope{int(self.rope)} swiglu{hid}"

    def _rotate(self, t):
        n, half = t.shape[2], self.hd // 2
        freq = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half))
        ang = torch.arange(n, dtype=torch.float32)[:, None] * freq[None]
        cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
        rot = torch.cat([-t[..., half:], t[..., :half]], -1)
        return t * cos + rot * sin

    def forward(self, x):
        b, n, d = x.shape
        y = self.n1(x)
        q = self.q(y).view(b, n, self.h, self.hd).transpose(1, 2)
        k = self.k(y).view(b, n, self.kv, self.hd).transpose(1, 2)
        v = self.v(y).view(b, n, self.kv, self.hd).transpose(1, 2)
        if self.rope:
            q, k = self._rotate(q), self._rotate(k)
        k, v = k.repeat_interleave(self.h // self.kv, 1), v.repeat_interleave(self.h // self.kv, 1)
        if self.sdpa:
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = q @ k.transpose(-2, -1) / self.hd ** 0.5
            mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
            a = torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, n, d))
        y = self.n2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(y)) * self.up(y))


class ConvModule(nn.Module):
    """A conformer's convolution module: pointwise conv + GLU, depthwise conv1d over time,
    BatchNorm, SiLU, pointwise conv; tokens transposed to channels and back."""

    def __init__(self, rng, d: int):
        super().__init__()
        k = int(rng.choice([3, 5, 7]))
        self.norm, self.pw1 = nn.LayerNorm(d), nn.Conv1d(d, 2 * d, 1)
        self.dw, self.bn = nn.Conv1d(d, d, k, padding=k // 2, groups=d), nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)

    def forward(self, x):
        y = nn.functional.glu(self.pw1(self.norm(x).transpose(1, 2)), dim=1)
        return x + self.pw2(nn.functional.silu(self.bn(self.dw(y)))).transpose(1, 2)


class TBlock(nn.Module):
    """One random block on (B, L, D) tokens."""
    KINDS = ("encoder", "mha", "sdpa", "ffn", "norm", "act", "linear", "decoder", "conv", "mixer", "scale")

    def __init__(self, rng, d: int):
        super().__init__()
        self.kind, self.out = str(rng.choice(self.KINDS)), d
        h, causal, pre = _heads(rng, d), bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        self.desc = f"{self.kind} d{d}"
        if self.kind == "encoder":
            self.f = nn.TransformerEncoderLayer(d, h, int(rng.integers(4, 64)), dropout=0.0, batch_first=True,
                                                activation=str(rng.choice(["relu", "gelu"])), norm_first=pre)
            self.desc += f" h{h} pre{int(pre)}"
        elif self.kind == "mha":
            self.norm, self.f, self.causal = nn.LayerNorm(d), nn.MultiheadAttention(d, h, batch_first=True), causal
            self.desc += f" h{h} causal{int(causal)}"
        elif self.kind == "sdpa":
            self.norm, self.f = nn.LayerNorm(d), SelfAttention(d, h, causal)
            self.desc += f" h{h} causal{int(causal)}"
        elif self.kind == "ffn":
            act = [nn.GELU(), nn.GELU("tanh"), nn.SiLU(), nn.ReLU()][int(rng.integers(0, 4))]
            hid = int(rng.integers(1, 80))
            self.f = nn.Sequential(nn.LayerNorm(d) if pre else nn.Identity(), nn.Linear(d, hid), act,
                                   nn.Linear(hid, d))
            self.desc += f" {hid} {type(act).__name__}"
        elif self.kind == "norm":
            self.f = nn.LayerNorm(d) if rng.random() < 0.6 else nn.RMSNorm(d)
            self.desc += f" {type(self.f).__name__}"
        elif self.kind == "act":
            self.f = [nn.GELU(), nn.SiLU(), nn.Tanh(), nn.Softmax(-1)][int(rng.integers(0, 4))]
            self.desc += f" {type(self.f).__name__}"
        elif self.kind == "decoder":
            self.f = DecoderAttention(rng, d, h)
            self.desc += " " + self.f.desc
        elif self.kind == "conv":
            self.f = ConvModule(rng, d)
        elif self.kind == "mixer":      # token mixing: a linear over the token dim (sized on first use)
            self.f = nn.LazyLinear(int(rng.integers(1, 20)))
        elif self.kind == "scale":      # LayerScale / a learned per-channel gain
            self.f = nn.Parameter(torch.rand(d) + 0.2)
        else:
            self.out = int(rng.integers(1, 48))
            self.f = nn.Linear(d, self.out, bias=bool(rng.random() < 0.7))
            self.desc += f"->{self.out}"

    def forward(self, x):
        if self.kind == "mixer":
            return self.f(x.transpose(1, 2)).transpose(1, 2)
        if self.kind == "scale":
            return x * self.f
        if self.kind == "mha":
            y = self.norm(x)
            mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1) if self.causal else None
            return x + self.f(y, y, y, need_weights=False, attn_mask=mask)[0]
        if self.kind == "sdpa":
            return x + self.f(self.norm(x))
        if self.kind in ("ffn",):
            return x + self.f(x)
        return self.f(x)


class TNet(nn.Module):
    """A front (token ids through an embedding, image patches through a strided conv, or
    tokens as they are), TBlocks, a head (mean over tokens, the first token, or none)."""

    def __init__(self, rng, front: str, d: int):
        super().__init__()
        self.front, c = front, d
        if front == "ids":
            self.embed, self.pos = nn.Embedding(VOCAB, d), nn.Parameter(0.1 * torch.randn(1, 64, d))
        elif front == "patches":
            self.p = int(rng.choice([2, 4]))
            self.embed, self.cls = nn.Conv2d(3, d, self.p, self.p), nn.Parameter(torch.randn(1, 1, d))
        blocks = []
        for _ in range(int(rng.integers(1, 4))):
            blocks.append(TBlock(rng, c))
            c = blocks[-1].out
        self.blocks = nn.ModuleList(blocks)
        self.pool = str(rng.choice(["mean", "first", "none"]))
        self.head = nn.Linear(c, int(rng.integers(1, 12))) if self.pool != "none" else nn.Identity()
        self.desc = f"{front} " + " | ".join(b.desc for b in blocks) + f" | {self.pool}"

    def forward(self, x):
        if self.front == "ids":
            x = self.embed(x) + self.pos[:, :x.shape[1]]
        elif self.front == "patches":
            x = self.embed(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
        for b in self.blocks:
            x = b(x)
        if self.pool == "mean":
            x = x.mean(1)
        elif self.pool == "first":
            x = x[:, 0]
        return self.head(x)


class Net(nn.Module):
    def __init__(self, rng, family: str, c: int):
        super().__init__()
        blocks = []
        for _ in range(int(rng.integers(1, 5))):
            blocks.append((Block if family == "cnn" else Block1d)(rng, c))
            c = blocks[-1].out
        self.blocks = nn.ModuleList(blocks)
        pool = nn.AdaptiveAvgPool2d(1) if family == "cnn" else nn.AdaptiveAvgPool1d(int(rng.integers(1, 4)))
        self.head = nn.Sequential(pool, nn.Flatten(), nn.LazyLinear(int(rng.integers(1, 12)))) \
            if rng.random() < 0.7 else nn.Identity()
        self.desc = " | ".join(b.desc for b in blocks)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


VOCAB = 50
INPUTS = {"normal": lambda s: torch.randn(s), "large": lambda s: 300 * torch.randn(s),
          "tiny": lambda s: 1e-3 * torch.randn(s), "positive": lambda s: torch.rand(s),
          "image": lambda s: (torch.rand(s) * 255).round(), "ids": lambda s: torch.randint(0, VOCAB, s)}
FLOAT_KINDS = ("normal", "large", "tiny", "positive", "image")
SCHEMES = ("static", "dynamic", "weight_only")


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 1.0 if na == nb == 0 else float(a @ b / (na * nb + 1e-300))


def draw(rng, family: str):
    """(model, input shape, input kind, scheme, description) for the next model of the sweep: the
    next one that torch runs (its own kernels refuse a few drawn geometries: oneDNN's transposed
    conv "could not construct a memory descriptor")."""
    while True:
        try:
            return _draw(rng, family)
        except RuntimeError:
            continue


def _draw(rng, family: str):
    torch.manual_seed(int(rng.integers(1 << 30)))
    if family == "transformer":
        return _draw_transformer(rng)
    c = int(rng.integers(1, 20))
    shape = (int(rng.integers(1, 3)), c, int(rng.integers(4, 40)), int(rng.integers(4, 40))) if family == "cnn" \
        else (int(rng.integers(1, 4)), c, int(rng.integers(8, 80)))
    net = Net(rng, family, c).eval()     # (eval: a batch norm over 1 x 1 maps of one image cannot train)
    kind = str(rng.choice(FLOAT_KINDS))
    with torch.no_grad():
        net(INPUTS[kind](shape))        # sizes the LazyLinear
    for m in net.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
    # mostly static; the linear-only schemes leave every conv, pool and batch norm float (conv2d_float)
    scheme = str(rng.choice(["static", "static", "dynamic", "weight_only"]))
    return net.eval(), shape, kind, scheme, f"{scheme} {kind} {shape} {net.desc}"


def _draw_transformer(rng):
    front, b, n = str(rng.choice(["ids", "patches", "tokens"])), int(rng.integers(1, 3)), int(rng.integers(1, 33))
    d = int(rng.choice([4, 6, 8, 12, 16, 20, 24, 32, 48]))
    net = TNet(rng, front, d).eval()
    if front == "ids":
        shape, kind = (b, n), "ids"
    elif front == "patches":
        shape, kind = (b, 3, net.p * int(rng.integers(1, 6)), net.p * int(rng.integers(1, 6))), "normal"
    else:
        shape, kind = (b, n, d), str(rng.choice(["normal", "large", "tiny", "positive"]))
    with torch.no_grad():
        net(INPUTS[kind](shape))        # sizes the token mixers' LazyLinear
    for m in net.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    scheme = str(rng.choice(SCHEMES))
    return net, shape, kind, scheme, f"{scheme} {kind} {shape} {net.desc}"


class NotExported(Exception):
    """torch.export cannot export the model with these dims free (its code fixes one)."""


def dynamic_dims(family: str, shape, kind: str) -> dict:
    """{input dim: its upper bound} that --dynamic leaves free: the batch, and the sequence or
    the map (a patch embedding's map must stay a multiple of its patch: batch only)."""
    free = {0: 4}
    if family == "cnn":
        free.update({2: 48, 3: 48})
    elif family == "temporal":
        free[2] = 96
    elif kind == "ids" or len(shape) == 3:
        free[1] = 40
    return free


def check(net, shape, kind, device, scheme="static", dynamic=None, rng=None) -> None:
    """Raise AssertionError where vkq disagrees with its reference or with PT2E. dynamic ({dim:
    upper bound}): one program for those dims free (torch.export Dims), checked at the
    example's shape and at two others drawn within the bounds."""
    import vkq
    from vkq.api import quantize      # (vkq.quantize, without a progress switch)
    if dynamic:      # export takes a free dim of size 1 as the constant 1 (its 0/1 specialisation)
        shape = tuple(max(n, 2) if d in dynamic else n for d, n in enumerate(shape))
    x = INPUTS[kind](shape)
    shapes = [shape]
    dims = None
    if dynamic:
        from torch.export import Dim
        # the batch may be 1 (its example is not: 0/1 specialisation); the first other shape
        # checked has batch 1 (the executor's view rewrites once folded more there: a881a28)
        lo = {d: 1 if d == 0 else 2 for d in dynamic}
        dims = ({d: Dim(f"d{d}", min=lo[d], max=hi) for d, hi in dynamic.items()},)
        for k in range(2):
            shapes.append(tuple((1 if d == 0 and k == 0 else int(rng.integers(lo[d], dynamic[d] + 1))) if d in dynamic
                                else n for d, n in enumerate(shape)))
    calib = [(INPUTS[kind](sh),) for sh in shapes]
    if dims is not None:
        try:
            torch.export.export(net, (x,), dynamic_shapes=dims)
        except Exception as e:      # torch.export's own failure or constraint violation: the model's
            raise NotExported(f"{type(e).__name__}: {e}") from e
    gm = quantize(net, (x,), calib, scheme=scheme, progress=False, dynamic_shapes=dims)
    with tempfile.TemporaryDirectory() as tmp:     # every model also goes through its .vkq file
        prog = vkq.load(vkq.compile(gm, (x,), dynamic_shapes=dims, progress=False).save(Path(tmp) / "m.vkq"), device)
    # float ops on the device (layer norm, softmax, ...) round in the last bit unlike the
    # reference (vkq/ops/float.py), and a quantize after one may then land a step away
    floats = any(prog.program.tensors[o].dtype == "float32" for n in prog.program.nodes if n.op != "dequantize"
                 for o in n.outputs)
    for sh in shapes:
        x = x if sh == shape else INPUTS[kind](sh)
        got, ref = prog(x.numpy()), prog.run_reference(x.numpy())
        if not np.allclose(got, ref, rtol=1e-5, atol=1e-6 * (np.abs(ref).max() + 1e-30)) and \
                (not floats or _cosine(got, ref) < 0.9999):
            raise AssertionError(f"at {sh}: Vulkan != reference: {int(np.sum(got != ref))} of {got.size} differ")
        with torch.no_grad():
            cos = _cosine(got, gm(x).numpy())
        if cos < 0.99:
            raise AssertionError(f"at {sh}: cosine {cos:.4f} with PT2E's eager output")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="llvmpipe")
    ap.add_argument("--family", choices=("cnn", "temporal", "transformer"), default="cnn")
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", type=int, nargs="*", help="run only these indices of the sweep (with its seed)")
    ap.add_argument("--dynamic", action="store_true",
                    help="export with the batch and sequence/map dims free (one program for all sizes)")
    ap.add_argument("--traceback", action="store_true")
    args = ap.parse_args(argv)
    import vkq
    from vkq.device import get_device
    vkq._quiet_third_party_logs()
    device = get_device(args.device)
    rng = np.random.default_rng(args.seed)
    from vkq.dynamic import DynamicShapeError
    failures = refused = 0
    for i in range(args.count):
        net, shape, kind, scheme, desc = draw(rng, args.family)
        sizes = np.random.default_rng([args.seed, i])      # the other sizes --dynamic checks
        if args.only and i not in args.only:
            continue
        free = dynamic_dims(args.family, shape, kind) if args.dynamic else None
        try:
            check(net, shape, kind, device, scheme, free, sizes)
        except (DynamicShapeError, NotExported) as e:
            # the model fixes a free dim (torch.export fails) or vkq refuses it by name
            refused += 1
            print(f"REFUSED {i}: {desc}: {type(e).__name__}: {str(e)[:200 if not args.traceback else None]}", flush=True)
        except Exception as e:         # one line per failing model, then go on
            failures += 1
            print(f"FAIL {i}: {desc}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            if args.traceback:
                traceback.print_exc()
    more = f", {refused} refused a dynamic dim by name" if refused else ""
    print(f"{args.count} models ({args.family}, seed {args.seed}{', dynamic' if args.dynamic else ''}) on "
          f"{device.info.name}: {failures} failed{more}", flush=True)
    return failures


if __name__ == "__main__":
    sys.exit(min(main(), 100))
