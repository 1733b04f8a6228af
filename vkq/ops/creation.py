"""Tensors made from a shape, and the triangle of a matrix (shaders/creation.comp).

In a static program these are constants, folded before lowering. With a dynamic sequence
length they are not: a decoder's causal mask (`torch.ones(L, L).tril()`, `full((L, L), -inf)
.triu(1)`), rotary positions (`arange(L)`) and padding (`zeros(B, 1, D)`) have the run-time
length in their shape, so they are ops of the program. Without them each ran through torch
(torch_op), which a `.vkq` runner without torch cannot do.

  full(; shape, value, dtype)          every element `value`; dtype "float32" / "int32" / "bool"
                                       (zeros, ones, full, new_*, *_like, empty: zeros)
  arange(; start, end, step, dtype)    torch.arange: ceil((end - start) / step) values; float32
                                       ones are float32(start + i * step) computed in float64,
                                       as torch does
  tril(x; diagonal), triu(x; diagonal) x with the elements above (tril) / below (triu) the
                                       diagonal of its last two dims zeroed, any word dtype

On Vulkan: float32 / int32 / bool words (an int64 tensor is int32 words, as everywhere in a
Program). An arange with a fractional start or step declines (its shader counts in int32,
exact; float32 arithmetic would differ from torch's float64 in the last bit): its
reference runs it on the CPU, still without torch.
"""
from __future__ import annotations

import math

import numpy as np

from .float import _elementwise, _numel
from .logic import _op, scalar_word

DTYPES = ("float32", "int32", "bool")


def _check(op, dtype, **numbers):
    """A program file's attrs, refused by name where they are not what the op takes."""
    if dtype not in DTYPES:
        raise ValueError(f"{op}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    for name, v in numbers.items():
        if isinstance(v, bool) and name != "value" or not isinstance(v, (bool, int, float)):
            raise ValueError(f"{op}: {name} {v!r} is not a number")
    if op == "arange" and numbers["step"] == 0:
        raise ValueError("arange: step 0")


def full(*, shape, value, dtype):
    _check("full", dtype, value=value)
    if dtype == "bool":
        value = bool(value)
    return np.full(tuple(shape), np.asarray(value).astype(np.float32 if dtype == "float32" else np.int32))


def arange(*, start, end, step, dtype):
    _check("arange", dtype, start=start, end=end, step=step)
    n = max(0, math.ceil((end - start) / step))
    if dtype == "float32":
        return (start + np.arange(n, dtype=np.float64) * step).astype(np.float32)
    return (int(start) + np.arange(n, dtype=np.int64) * int(step)).astype(np.int32)   # wraps as int32


def tril(x, *, diagonal=0):
    return np.tril(np.asarray(x), diagonal)


def triu(x, *, diagonal=0):
    return np.triu(np.asarray(x), diagonal)


# ---------------------------------------------------------------- builds

def _dispatch(ctx, variant, buffers, n, push):
    if n == 0:
        return []
    return [_elementwise(ctx, "creation", buffers, n, (n, *push), [variant])]


def _full_build(ctx, node):
    out = node.outputs[0]
    dtype = node.attrs["dtype"]
    _check("full", dtype, value=node.attrs["value"])
    if list(node.attrs["shape"]) != list(ctx.spec(out).shape):
        raise ValueError(f"{node.name}: full of shape {node.attrs['shape']} into {out!r} of {ctx.spec(out).shape}")
    value = int(bool(node.attrs["value"])) if dtype == "bool" else node.attrs["value"]
    word = scalar_word(value, "float32" if dtype == "float32" else "int32")
    return _dispatch(ctx, "FULL", [ctx.buffer(out)], _numel(ctx.spec(out).shape), (word, 0, 0))


def _arange_build(ctx, node):
    out, at = node.outputs[0], node.attrs
    _check("arange", at["dtype"], start=at["start"], end=at["end"], step=at["step"])
    n = _numel(ctx.spec(out).shape)
    if n != arange(start=at["start"], end=at["end"], step=at["step"], dtype="int32").size:
        raise ValueError(f"{node.name}: arange({at['start']}, {at['end']}, {at['step']}) is not {n} values")
    variant = "IOTA_FLOAT" if at["dtype"] == "float32" else "IOTA_INT"
    return _dispatch(ctx, variant, [ctx.buffer(out)], n, (scalar_word(int(at["start"]), "int32"),
                                                            scalar_word(int(at["step"]), "int32"), 0))


def _triangle_build(ctx, node):
    x, out = node.inputs[0], node.outputs[0]
    shape = ctx.spec(x).shape
    return _dispatch(ctx, node.op.upper(), [ctx.buffer(x), ctx.buffer(out)], _numel(shape),
                     (int(node.attrs.get("diagonal", 0)), shape[-2], shape[-1]))


# ---------------------------------------------------------------- declines

def _made_decline(node, tensors):
    dtype = tensors[node.outputs[0]].dtype
    if dtype not in ("float32", "int32"):
        return f"{node.op}: a {dtype} tensor (the kernel writes float32 / int32 words)"
    return None


def _integral(v) -> bool:
    return isinstance(v, dict) or float(v) == int(v)      # {"expr": ...}: a symbolic int


def _arange_decline(node, tensors):
    at = node.attrs
    if not all(_integral(at[k]) for k in ("start", "step")):
        return (f"arange({at['start']}, {at['end']}, {at['step']}): a fractional start or step "
                "(the kernel counts in int32)")
    return _made_decline(node, tensors)


def _triangle_decline(node, tensors):
    x, out = tensors[node.inputs[0]], tensors[node.outputs[0]]
    if x.dtype not in ("float32", "int32") or out.dtype != x.dtype:
        return f"{node.op}: a {x.dtype} tensor (the kernel moves float32 / int32 words)"
    if len(x.shape) < 2:
        return f"{node.op}: a tensor of rank {len(x.shape)} (needs a matrix)"
    return None


# ---------------------------------------------------------------- registration

_op("full", full, _full_build, _made_decline, ("creation",),
    "A tensor of one value (zeros, ones, full) of a shape known at run time.")
_op("arange", arange, _arange_build, _arange_decline, ("creation",),
    "torch.arange(start, end, step), bounds known at run time.")
_op("tril", tril, _triangle_build, _triangle_decline, ("creation",),
    "The lower triangle of the last two dims (a causal mask).")
_op("triu", triu, _triangle_build, _triangle_decline, ("creation",),
    "The upper triangle of the last two dims (a causal mask).")
