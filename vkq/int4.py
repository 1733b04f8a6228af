"""Group-wise low-bit weights: int4 values eight to an int32 word, a float32 scale per (row, group).

The format (GroupWeights, numpy only). A weight matrix W (N, K) is cut along K into
ng = ceil(K / G) groups of G in {32, 64, 128, 256} values; the last group is partial when G
does not divide K (it holds K - (ng - 1) * G real values; its other positions are padding,
stored as u = 0). Per (row n, group g):
    scale[n, g]   float32
    zero[n, g]    int32 in [0, 15]   (the integer zero point)
    offset[n, g]  float32, or no offset at all (offset None)
and per value an unsigned 4-bit integer u in [0, 15]. A weight's value is, in float32 with
each operation rounded once (no fused multiply-add):

    w[n, k] = f32(u[n, k] - zero[n, g]) * scale[n, g]              (offset None)
    w[n, k] = (f32(u[n, k] - zero[n, g]) * scale[n, g]) + offset[n, g]

u - zero is an exact small integer, so the first float operation is the multiply. What maps to
it with no second rounding (the integers are the source's, the scales its values widened
exactly to float32):
    GGUF Q4_0  w = d * (q - 8)    u = q, zero = 8, scale = f32(d), offset None
    GGUF Q4_1  w = d * q + m      u = q, zero = 0, scale = f32(d), offset = f32(m)
               (gguf.quants computes (d * q) + m in float32: the same two roundings)
    torchao int4 (IntxWeightOnlyConfig / Int8DynamicActivationIntxWeightConfig, int8-coded
               values q in [-8, 7], integer zero point zp in [-8, 7]): w = f32(q - zp) * s
               u = q + 8, zero = zp + 8, scale = s, offset None  (from_torchao)
    vkq's own quantize_groups: symmetric (zero = 8) or asymmetric (integer zero point).
GGUF Q8_0 (w = d * q, q int8, blocks of 32) is a separate kind, bits = 8: int8 values q in
place of u - zero (zero 0, no offset), w = f32(q) * scale. vkq's int8 weights (one scale a
row) cannot hold a scale a block exactly; the int4 linears' kernels read these groups as they
are (their W8 variants, node attr bits = 8: vkq/ops/linear_int4.py), no second rounding.

Packing (pack / unpack): a row's values, K padded to ng * G with u = 0, eight to a word:
    value k of a row is in word k // 8, bits [8 * (k % 4) + 4 * ((k % 8) // 4), +4)
i.e. k = 8j + i (i < 4) is the low nibble of byte i of word j and k = 8j + 4 + i its high
nibble, so that (word & 0x0F0F0F0F) holds values 8j..8j+3 as four bytes and
((word >> 4) & 0x0F0F0F0F) values 8j+4..8j+7: one int8x4 word each, the operand of a 4x8-bit
integer dot product, with two masks and a shift. qweight: int32 (N, ng * G / 8).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GROUP_SIZES = (32, 64, 128, 256)
U_MAX = 15
SYMMETRIC_ZERO = 8          # symmetric weights: u = q + 8, q in [-8, 7]


class GroupFormatError(ValueError):
    """Weights, a group size or a tensor type the group-wise format cannot hold."""


@dataclass
class GroupWeights:
    """W (n, k) in groups of group_size along k (see the module docstring for the value of a
    weight). bits 4: qweight int32 (n, words) packed nibbles; bits 8 (GGUF Q8_0): qweight int8
    (n, ng * group_size), zero all 0. scale float32 (n, ng), zero int32 (n, ng), offset
    float32 (n, ng) or None."""
    n: int
    k: int
    group_size: int
    qweight: np.ndarray
    scale: np.ndarray
    zero: np.ndarray
    offset: np.ndarray | None = None
    bits: int = 4

    @property
    def groups(self) -> int:
        return -(-self.k // self.group_size)

    @property
    def symmetric(self) -> bool:
        """Every zero point 8 and no offset: the kernels need no per-group zero point."""
        return self.offset is None and bool(np.all(self.zero == SYMMETRIC_ZERO))

    def values(self) -> np.ndarray:
        """The integers: u int32 (n, ng * G) for bits 4 (padding 0), q int32 for bits 8."""
        return unpack(self.qweight) if self.bits == 4 else self.qweight.astype(np.int32)

    def dequantize(self) -> np.ndarray:
        return dequantize(self)

    def nbytes(self) -> int:
        """Bytes of the packed weights and their per-group constants."""
        return self.qweight.nbytes + self.scale.nbytes + (0 if self.symmetric else self.zero.nbytes) + \
            (0 if self.offset is None else self.offset.nbytes)

    def __post_init__(self):
        ng, g = self.groups, self.group_size
        if g not in GROUP_SIZES:
            raise GroupFormatError(f"group size {g}: expected one of {GROUP_SIZES}")
        width = ng * g // 8 if self.bits == 4 else ng * g
        want = np.int32 if self.bits == 4 else np.int8
        if self.qweight.shape != (self.n, width) or self.qweight.dtype != want:
            raise GroupFormatError(f"qweight {self.qweight.dtype} {self.qweight.shape}, expected {np.dtype(want)} "
                                   f"({self.n}, {width}) for K = {self.k} in groups of {g}")
        for name in ("scale", "zero", "offset"):
            a = getattr(self, name)
            if a is not None and a.shape != (self.n, ng):
                raise GroupFormatError(f"{name} of shape {a.shape}, expected ({self.n}, {ng})")
        if self.scale.dtype != np.float32 or self.zero.dtype != np.int32 or \
                (self.offset is not None and self.offset.dtype != np.float32):
            raise GroupFormatError("scale and offset must be float32, zero int32")
        if self.zero.min(initial=0) < 0 or self.zero.max(initial=0) > U_MAX:
            raise GroupFormatError(f"zero points must lie in [0, {U_MAX}]")


# -- packing ----------------------------------------------------------------------------------

_NIBBLE_SHIFT = np.array([0, 8, 16, 24, 4, 12, 20, 28], np.uint32)   # bit of value 8j + i


def pack(u) -> np.ndarray:
    """u int (n, L), values in [0, 15], L a multiple of 8 -> int32 (n, L / 8) (module docstring)."""
    u = np.asarray(u)
    if u.ndim != 2 or u.shape[1] % 8:
        raise GroupFormatError(f"pack takes (n, a multiple of 8) values, got {u.shape}")
    if u.size and (u.min() < 0 or u.max() > U_MAX):
        raise GroupFormatError("int4 values must lie in [0, 15]")
    v = u.astype(np.uint32).reshape(u.shape[0], -1, 8) << _NIBBLE_SHIFT
    return np.bitwise_or.reduce(v, axis=2).view(np.int32)


def unpack(words) -> np.ndarray:
    """int32 (n, W) -> u int32 (n, 8 W), the inverse of pack."""
    w = np.asarray(words, np.int32).view(np.uint32)
    return ((w[:, :, None] >> _NIBBLE_SHIFT) & 15).astype(np.int32).reshape(w.shape[0], -1)


def _grouped(a, k: int, g: int, fill=0):
    """(n, k) -> (n, ng, g), padded with fill."""
    ng = -(-k // g)
    p = np.full((a.shape[0], ng * g), fill, a.dtype)
    p[:, :k] = a
    return p.reshape(a.shape[0], ng, g)


def padding_mask(k: int, g: int) -> np.ndarray:
    """bool (ng, g): True where a group position holds a real value (k' < K)."""
    ng = -(-k // g)
    return (np.arange(ng * g) < k).reshape(ng, g)


# -- the values -------------------------------------------------------------------------------

def dequantize(gw: GroupWeights) -> np.ndarray:
    """The float32 weights (n, k), exactly as the module docstring defines them."""
    ng, g = gw.groups, gw.group_size
    v = gw.values().reshape(gw.n, ng, g)
    d = (v - gw.zero[:, :, None]).astype(np.float32)
    w = d * gw.scale[:, :, None]
    if gw.offset is not None:
        w = w + gw.offset[:, :, None]
    return np.ascontiguousarray(w.reshape(gw.n, ng * g)[:, :gw.k])


def quantize_groups(w, group_size: int = 32, symmetric: bool = True) -> GroupWeights:
    """float32 (N, K) -> int4 GroupWeights, as torchao's int4 per-group quantization computes
    it (choose_qparams_affine + quantize_affine, qmin -8, qmax 7), in float32:
      symmetric:  scale = max(amax / 7.5, eps), q = clamp(rint(w * (1 / scale)), -8, 7), zero = 8
      asymmetric: mn = min(0, min w), mx = max(0, max w), scale = max((mx - mn) / 15, eps),
                  zp = clamp(-8 - rint(mn / scale), -8, 7), q = clamp(rint(w * (1 / scale)) + zp, -8, 7),
                  zero = zp + 8
    with eps = float32's machine epsilon and u = q + 8. Non-finite weights: GroupFormatError."""
    w = np.asarray(w, np.float32)
    if w.ndim != 2:
        raise GroupFormatError(f"quantize_groups takes a 2-D weight, got shape {w.shape}")
    if group_size not in GROUP_SIZES:
        raise GroupFormatError(f"group size {group_size}: expected one of {GROUP_SIZES}")
    if not np.isfinite(w).all():
        raise GroupFormatError("the weight holds a NaN or an infinity")
    n, k = w.shape
    wg = _grouped(w, k, group_size)          # padding 0: changes neither the range nor amax
    eps = np.finfo(np.float32).eps
    if symmetric:
        amax = np.abs(wg).max(axis=2)
        scale = np.maximum(amax / np.float32(7.5), eps).astype(np.float32)
        zp = np.zeros((n, wg.shape[1]), np.float32)
    else:
        mn, mx = np.minimum(wg.min(axis=2), 0), np.maximum(wg.max(axis=2), 0)
        scale = np.maximum((mx - mn) / np.float32(15), eps).astype(np.float32)
        zp = np.clip(np.float32(-8) - np.rint(mn / scale), -8, 7).astype(np.float32)
    q = np.clip(np.rint(wg * (np.float32(1) / scale)[:, :, None]) + zp[:, :, None], -8, 7)
    u = (q + 8).astype(np.int32)
    u[:, ~padding_mask(k, group_size)] = 0
    return GroupWeights(n, k, group_size, pack(u.reshape(n, -1)), scale, (zp + 8).astype(np.int32))


def from_int_values(q, scale, zero_point, group_size: int, k: int | None = None) -> GroupWeights:
    """torchao-style int4 groups: q int (N, K) in [-8, 7], scale (N, ng), integer zero_point
    (N, ng) in [-8, 7] (None: 0), w = f32(q - zp) * scale -> GroupWeights (u = q + 8,
    zero = zp + 8), the integers kept and the scales as float32 (a float16/bfloat16 scale widens
    exactly)."""
    q = np.asarray(q)
    n, kk = q.shape
    k = kk if k is None else k
    ng = -(-k // group_size)
    scale = np.asarray(scale).reshape(n, ng)
    zp = np.zeros((n, ng), np.int64) if zero_point is None else np.asarray(zero_point).reshape(n, ng)
    if q.size and (q.min() < -8 or q.max() > 7):
        raise GroupFormatError("int4 values must lie in [-8, 7]")
    if zp.size and (zp.min() < -8 or zp.max() > 7):
        raise GroupFormatError("int4 zero points must lie in [-8, 7]")
    if np.any(zp != np.rint(zp)):
        raise GroupFormatError("zero points must be integers (a float zero point domain is not this format)")
    u = _grouped(q[:, :k].astype(np.int32) + 8, k, group_size, fill=0)
    u[:, ~padding_mask(k, group_size)] = 0
    return GroupWeights(n, k, group_size, pack(u.reshape(n, -1)), scale.astype(np.float32),
                        (zp.astype(np.int64) + 8).astype(np.int32))


# -- torchao's quantized weights -----------------------------------------------------------------

def from_torchao(t) -> GroupWeights | None:
    """A torchao int4 group-wise weight (IntxUnpackedToInt8Tensor: what IntxWeightOnlyConfig and
    Int8DynamicActivationIntxWeightConfig make, int8-coded values in [-8, 7], block (1, G), a
    scale and an integer zero point a group) -> GroupWeights with its own integers and scales,
    or None for any other tensor."""
    if not all(hasattr(t, a) for a in ("qdata", "scale", "zero_point", "block_size")):
        return None
    import torch
    if getattr(t, "target_dtype", None) not in (torch.int4, torch.uint4) or t.qdata.dim() != 2:
        return None
    n, k = t.qdata.shape
    if tuple(t.block_size) != (1, t.block_size[1]) or t.block_size[1] not in GROUP_SIZES:
        return None
    q = t.qdata.to(torch.int32).numpy()
    zp = None if t.zero_point is None else t.zero_point.to(torch.int32).numpy()
    if getattr(t, "target_dtype", None) == torch.uint4:      # values 0..15: the same integers, shifted by 8
        q, zp = q - 8, (np.zeros(t.scale.shape, np.int32) if zp is None else zp) - 8
    return from_int_values(q, t.scale.float().numpy(), zp, int(t.block_size[1]), k)


def torchao_weights(model):
    """model with torchao int4 group-wise Linear weights -> (a copy whose those weights are plain
    float Parameters holding exactly torchao's dequantized values, {sha1 of those float32 bytes:
    their GroupWeights}, whether any quantizes its activations per token (8da4w)); (model, {},
    False) when there are none. The lowering recognizes the weights by their bytes and keeps
    torchao's integers and scales (no second rounding)."""
    import copy
    import hashlib
    import torch
    found = {name: gw for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)
             and (gw := from_torchao(m.weight)) is not None}
    if not found:
        return model, {}, False
    dynamic = any(getattr(m.weight, "activation_quantization", None) for name, m in model.named_modules()
                  if name in found)
    model = copy.deepcopy(model)
    known = {}
    for name, gw in found.items():
        m = model.get_submodule(name)
        w = dequantize(gw)
        m.weight = torch.nn.Parameter(torch.from_numpy(w), requires_grad=False)
        known[hashlib.sha1(w.tobytes()).hexdigest()] = gw
    return model, known, dynamic


# -- GGUF blocks ------------------------------------------------------------------------------

def _gguf():
    import gguf
    return gguf


def gguf_block_types() -> dict:
    """GGMLQuantizationType -> the kind from_gguf makes of it."""
    t = _gguf().GGMLQuantizationType
    return {t.Q4_0: "int4", t.Q4_1: "int4 with offset", t.Q8_0: "int8 groups"}


def from_gguf(tensor_type, raw, shape) -> GroupWeights:
    """A GGUF tensor's blocks -> GroupWeights with the file's integers and its fp16 scales
    widened to float32 (no second rounding). tensor_type: gguf.GGMLQuantizationType (or its
    int); raw: the tensor's bytes (uint8, as gguf.GGUFReader's tensor.data); shape: the logical
    (N, K) of the weight (numpy order: K, GGUF's ne0, is the blocked dimension, a multiple of 32).
    A type other than Q4_0, Q4_1, Q8_0: GroupFormatError."""
    g = _gguf()
    try:
        tt = g.GGMLQuantizationType(int(tensor_type))
    except ValueError:
        raise GroupFormatError(f"unknown GGUF tensor type {tensor_type!r}") from None
    if tt not in gguf_block_types():
        raise GroupFormatError(f"GGUF tensor type {tt.name}: vkq reads Q4_0, Q4_1 and Q8_0 blocks only")
    block, nbytes = g.GGML_QUANT_SIZES[tt]
    n, k = (int(s) for s in shape)
    if k % block:
        raise GroupFormatError(f"GGUF {tt.name} tensor with K = {k}, not a multiple of its blocks of {block}")
    b = np.ascontiguousarray(np.asarray(raw, np.uint8)).reshape(-1)
    if b.size != n * k // block * nbytes:
        raise GroupFormatError(f"GGUF {tt.name} tensor of shape ({n}, {k}) needs {n * k // block * nbytes} bytes, "
                               f"got {b.size}")
    b = b.reshape(n, k // block, nbytes)
    d = b[:, :, 0:2].copy().view(np.float16)[:, :, 0].astype(np.float32)
    if tt == g.GGMLQuantizationType.Q8_0:
        q = b[:, :, 2:].copy().view(np.int8).reshape(n, k)
        return GroupWeights(n, k, block, q, d, np.zeros(d.shape, np.int32), None, bits=8)
    start = 2 if tt == g.GGMLQuantizationType.Q4_0 else 4
    qs = b[:, :, start:start + 16]           # byte i: value i (low nibble), value 16 + i (high)
    u = np.concatenate([qs & 15, qs >> 4], axis=2).astype(np.int32).reshape(n, k)
    if tt == g.GGMLQuantizationType.Q4_0:
        return GroupWeights(n, k, block, pack(u), d, np.full(d.shape, 8, np.int32))
    m = b[:, :, 2:4].copy().view(np.float16)[:, :, 0].astype(np.float32)
    return GroupWeights(n, k, block, pack(u), d, np.zeros(d.shape, np.int32), m)
