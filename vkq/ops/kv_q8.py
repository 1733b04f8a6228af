"""kv_quantize: a KV cache's new rows as int8 with a float32 scale a row (the int8 KV cache).

    kv_quantize   x f32 (..., D) -> rows int32 (..., W + 1), W = ceil(D / 4)

A row is one token's key (or value) of one KV head. Symmetric, one scale a row, in float32:
    amax  = max_d |x_d|
    scale = min(ftz(amax * f32(1/127)), 2^100)
    inv   = recip_newton(scale) if scale > 0 else 0
    q_d   = clamp(roundEven(x_d * inv), -127, 127)          (PyTorch's order: times 1/scale, round half
                                                               to even, clamp; no zero point)
    words 0..W-1: q Int8x4 (value d at byte d % 4 of word d // 4, zero bytes past D); word W:
    scale's float32 bits.
A row holding a NaN or an infinity: q 0, scale NaN (attention over it gives NaN, as over a
float cache). Only + - * and comparisons, no division (float_exact.glsl's rules): the device
(shaders/kv_quantize.comp) gives these bits. recip_newton's steps stay normal for scale in
[2^-126, 2^100] (ftz and the 2^100 bound keep it there).

    index_copy_q8  x int32 (..., size, W + 1), index int32 (k,), src f32 (..., k, D) -> int32 like x;
                   attrs dim (x's rank - 2): x with row index[j] of each slice replaced by
                   kv_quantize(src)'s row j (index_copy's rules: negative indices wrap, one outside
                   [-size, size) writes nothing, the last of equal ones wins)

The cache (vkq.lm_compile, kv_cache="int8") is such rows, (1, Hkv, max_context, W + 1) int32 a
layer for the keys and one for the values: 4 (W + 1) bytes a row against 4 D for float32 (D =
64: 68 against 256 bytes), read by attention_cached_q8 (vkq/ops/attention_cached.py). The graph
writes kv_quantize's rows with index_copy_ at the positions; vkq.passes.fuse_kv_write makes the
pair one index_copy_q8, which the executor plans in place into the state's buffer as it plans
the float cache's index_copy (vkq.executor): one dispatch quantizes and writes a step's rows
(shaders/index_copy_rows.comp, Q8), as many as the float cache's writes. The scale in the row's
own last word keeps one state tensor, one write and one binding a cache, as for float32.
"""
from __future__ import annotations

import numpy as np

from ..device import grid_1d
from ..registry import register_op
from .float_math import ftz, recip_newton

F32 = np.float32
INV_127 = F32(1 / 127)
MAX_SCALE = F32(2.0 ** 100)
LOCAL = 64


def row_words(d: int) -> int:
    """int32 words of one quantized row of d values: the packed bytes, then the scale."""
    return -(-int(d) // 4) + 1


def kv_quantize(x) -> np.ndarray:
    """The specification (the module docstring): float32 (..., D) -> int32 (..., ceil(D/4) + 1)."""
    x = np.asarray(x, F32)
    d = x.shape[-1]
    rows = x.reshape(-1, d)
    finite = np.isfinite(rows).all(axis=1)
    amax = np.abs(np.where(finite[:, None], rows, F32(0))).max(axis=1, initial=F32(0))
    scale = np.minimum(ftz(amax * INV_127), MAX_SCALE).astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        inv = np.where(scale > 0, recip_newton(np.where(scale > 0, scale, F32(1))), F32(0)).astype(F32)
        q = np.clip(np.rint(rows * inv[:, None]), -127, 127)
    q = np.where(finite[:, None], q, 0).astype(np.int8)
    w = row_words(d) - 1
    padded = np.zeros((rows.shape[0], 4 * w), np.int8)
    padded[:, :d] = q
    words = np.empty((rows.shape[0], w + 1), np.int32)
    words[:, :w] = padded.view(np.int32)          # little-endian: value 4i + c at byte c of word i
    words[:, w] = np.where(finite, scale, F32(np.nan)).astype(F32).view(np.int32)
    return words.reshape(*x.shape[:-1], w + 1)


def dequantize_rows(rows, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Quantized rows (..., W + 1) -> (q as float32 (..., 4 W), zero past d; scale float32 (...))."""
    rows = np.ascontiguousarray(rows, np.int32)
    w = rows.shape[-1] - 1
    if w != -(-int(d) // 4):
        raise ValueError(f"rows of {rows.shape[-1]} words do not hold {d} values and a scale")
    q = rows[..., :w].copy().view(np.int8).astype(F32)
    return q, rows[..., w].copy().view(F32)


def _decline(node, tensors):
    x, out = tensors[node.inputs[0]], tensors[node.outputs[0]]
    if x.dtype != "float32" or out.dtype != "int32":
        return f"kv_quantize: takes float32 rows to int32 words, got {x.dtype} -> {out.dtype}"
    if not x.shape or tuple(out.shape) != tuple(x.shape[:-1]) + (row_words(x.shape[-1]),):
        return f"kv_quantize: rows {x.shape} -> {out.shape} (..., D) -> (..., ceil(D/4) + 1)"
    return None


def _build(ctx, node):
    shape = ctx.spec(node.inputs[0]).shape
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    if rows == 0:
        return []
    ctx.device.info.check_loop_budget(shape[-1] + row_words(shape[-1]), f"{node.name}: kv_quantize")
    return [ctx.device.dispatch("kv_quantize", [ctx.buffer(node.inputs[0]), ctx.buffer(node.outputs[0])],
                                grid_1d(rows, LOCAL), local=(LOCAL,), spec=(shape[-1],), push=(rows,))]


def index_copy_q8(x, index, src, *, dim, src_transpose=None):
    """index_copy of kv_quantize(src)'s rows into x along dim (the module docstring); src_transpose
    [dim - 1, dim]: src is (..., k, heads, D), those two dims swapped (fold_head_transposes)."""
    from .logic import scatter
    src = np.asarray(src, F32)
    if src_transpose:
        src = np.swapaxes(src, int(dim) - 1, int(dim))
    return scatter(np.asarray(x, np.int32), index, kv_quantize(src), dim=int(dim), reduce="none", along=True)


def _copy_decline(node, tensors):
    x, index, src = (tensors[t] for t in node.inputs)
    out, dim = tensors[node.outputs[0]], node.attrs.get("dim")
    if (x.dtype, index.dtype, src.dtype, out.dtype) != ("int32", "int32", "float32", "int32"):
        return (f"index_copy_q8: takes int32 rows, int32 indices and float32 values, got {x.dtype}, {index.dtype}, "
                f"{src.dtype} -> {out.dtype}")
    rank = len(x.shape)
    if node.attrs.get("src_transpose"):
        if sorted(node.attrs["src_transpose"]) != [rank - 3, rank - 2]:
            return f"index_copy_q8: src transposed at dims {node.attrs['src_transpose']}, not {rank - 3} and {rank - 2}"
        src = type(src)((*src.shape[:-3], src.shape[-2], src.shape[-3], src.shape[-1]), src.dtype)
    if rank < 2 or dim != rank - 2 or len(index.shape) != 1 or len(src.shape) != rank             or tuple(src.shape[:-2]) != tuple(x.shape[:-2]) or src.shape[-2] != index.shape[0]             or x.shape[-1] != row_words(src.shape[-1]) or tuple(out.shape) != tuple(x.shape):
        return (f"index_copy_q8: rows {x.shape} along dim {dim} by an index {index.shape} of values {src.shape} "
                "(x (..., size, ceil(D/4) + 1), index (k,), values (..., k, D), dim = rank - 2)")
    return None


def _copy_build(ctx, node):
    """Into x's own buffer where the executor plans the update there (a state's), else into the
    output's after a copy of x: the rows named, one invocation each."""
    from .logic import INDEX_COPY_CHUNK
    from .shape import copy_words
    x, index, src = node.inputs
    xs, ss, out = ctx.spec(x).shape, ctx.spec(src).shape, node.outputs[0]
    swap = bool(node.attrs.get("src_transpose"))     # src (..., k, heads, D): the head dims swapped
    outer, size, k = int(np.prod(xs[:-2], dtype=np.int64)), xs[-2], ss[-3 if swap else -2]
    steps = [] if ctx.buffer(x) is ctx.buffer(out) else [copy_words(ctx, ctx.buffer(x), ctx.buffer(out),
                                                                     ctx.spec(x).device_words())]
    if outer * k == 0:
        return steps
    ctx.device.info.check_loop_budget(3 * ss[-1] + k, f"{node.name}: index_copy_q8")
    push = (outer, size, xs[-1], k, 1, xs[-3] if swap else 0)
    return steps + [ctx.device.dispatch("index_copy_rows", [ctx.buffer(out), ctx.buffer(index), ctx.buffer(src)],
                                        grid_1d(outer * k, LOCAL), local=(LOCAL,), spec=(INDEX_COPY_CHUNK, ss[-1]),
                                        push=push, defines=["Q8"])]


@register_op
class IndexCopyQ8:
    """index_copy of a KV cache's new rows quantized to int8 with a scale a row, in one dispatch
    (in place: a state's rows)."""
    name = "index_copy_q8"
    shaders = ("index_copy_rows",)
    reference = staticmethod(index_copy_q8)
    build = staticmethod(_copy_build)
    decline = staticmethod(_copy_decline)


@register_op
class KvQuantize:
    """A KV cache's new rows as int8 with a float32 scale a row (packed in int32 words)."""
    name = "kv_quantize"
    shaders = ("kv_quantize",)
    reference = staticmethod(kv_quantize)
    build = staticmethod(_build)
    decline = staticmethod(_decline)
