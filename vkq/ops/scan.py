"""Ops along one dim, an invocation a row (x seen as (outer, D, inner)): cumulative sums
(shaders/cumsum.comp) and arg max / min (shaders/argmax.comp).

  cumsum(x; dim, dtype)     x int32 (ids, bool masks) or float32 -> dtype ("int32" or
                            "float32"): int32 sums wrap; an int32 x summed to float32 is summed
                            exactly in int32 and rounded once; float32 sums are compensated
  cumprod, cummax, cummin(x; dim)   float32 or int32, the dtype kept: the product in double-float
                            (torch's CPU cumprod runs in double), int32 wrapping; the running max /
                            min as ATen's (a NaN stays, 0 after -0); prod is cumprod's last
  cummax_indices, cummin_indices(x; dim)   float32 or int32 -> int32: cummax / cummin's indices,
                            where the running extreme was last taken (ATen's rule: a NaN, or a
                            value >= / <= it, takes it)
  logcumsumexp(x; dim)      float32: ATen's running log-add-exp step, in float32 (ATen: double)
  argsort(x; dim, descending)   x float32 or int32 -> int32 indices, stable (equal values in
                            their order), NaN last ascending / first descending (torch's sort);
                            an invocation a value, its rank counted over its row (argsort.comp)
  argmax, argmin(x; dim, keepdim)   x float32 or int32 -> int32 indices, the first of equal
                            values, a NaN the largest / smallest (torch's); dim None: over all

What they are for: position ids computed from the input (RoBERTa's cumsum of its padding mask,
Llama's from its attention mask) and DETR's sine positions (a cumsum of the mask as floats).
And a segmentation map's or a classifier's argmax at the end of a model. They ran in torch on
the CPU, so a saved program needed torch to run.
"""
from __future__ import annotations

import numpy as np

from ..device import grid_1d
from ..registry import register_op
from .float import LOCAL, PER, _numel

# arg max / min of few long rows (an LM's greedy step over its vocabulary): a workgroup a row of
# ROW_LOCAL lanes (shaders/argmax.comp ROW) where an invocation a row would leave the device idle
ROW_MIN, ROW_MAX_ROWS, ROW_LOCAL = 1024, 64, 64

_VARIANT = {("int32", "int32"): "I2I", ("int32", "float32"): "I2F", ("float32", "float32"): "F2F"}


def _rows(shape, dim):
    """(outer, D, inner) of x seen along dim."""
    dim %= max(len(shape), 1)
    return _numel(shape[:dim]), (shape[dim] if shape else 1), _numel(shape[dim + 1:])


@register_op
class Cumsum:
    """Cumulative sum along `dim`: int32 or float32 in, `dtype` out (torch.cumsum; int64 ids as int32)."""
    name = "cumsum"
    shaders = ("cumsum",)

    @staticmethod
    def reference(x, *, dim, dtype):
        x = np.asarray(x)
        if x.ndim == 0:
            return x.astype(np.float32 if x.dtype.kind == "f" or dtype == "float32" else np.int32)
        if x.dtype.kind == "f":      # torch sums floats in double on the CPU (inf - inf: NaN, quietly, as torch)
            with np.errstate(invalid="ignore"):
                return np.cumsum(x.astype(np.float64), axis=dim).astype(np.float32)
        s = np.cumsum(x.astype(np.int32), axis=dim, dtype=np.int32)      # wraps, as the kernel
        return s.astype(np.float32) if dtype == "float32" else s

    @staticmethod
    def decline(node, tensors):
        src, dst = tensors[node.inputs[0]].dtype, tensors[node.outputs[0]].dtype
        if (src, dst) not in _VARIANT or dst != node.attrs["dtype"]:
            return f"cumsum: {src} -> {dst} (the kernel sums int32 to int32 or float32, float32 to float32)"
        return None

    @staticmethod
    def build(ctx, node):
        x, y = node.inputs[0], node.outputs[0]
        variant = _VARIANT[(ctx.spec(x).dtype, ctx.spec(y).dtype)]
        return [_along_dispatch(ctx, node, "cumsum", node.attrs["dim"], [variant])]


def _cummax(x, axis):
    """ATen's running max: a NaN stays once seen, an equal value replaces (0 after -0)."""
    out, best = np.empty_like(x), None
    for k in range(x.shape[axis]):
        v = np.take(x, [k], axis)
        best = v if best is None else np.where(np.isnan(v) | (~np.isnan(best) & (v >= best)), v, best)
        out[(slice(None),) * axis + (slice(k, k + 1),)] = best
    return out


def _logcumsumexp(x, axis):
    """ATen's CPU logcumsumexp: acc = log1p(exp(min - max)) + max of (x, acc) in double (x where
    both are the same infinity; a NaN stays), each output rounded to float32."""
    out = np.empty(x.shape, np.float32)
    acc = np.full(np.delete(x.shape, axis), -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(x.shape[axis]):
            v = np.take(x, k, axis).astype(np.float64)
            lo, hi = np.minimum(v, acc), np.maximum(v, acc)
            acc = np.where((lo != hi) | np.isfinite(lo), np.log1p(np.exp(lo - hi)) + hi, v)
            out[(slice(None),) * axis + (k,)] = acc
    return out


_SCANS = {     # op -> (float reference, int32 reference or None, shader variant stem, what it does)
    "cumprod": (lambda x, a: np.cumprod(x.astype(np.float64), axis=a).astype(np.float32),   # torch: in double
                lambda x, a: np.cumprod(x, axis=a, dtype=np.int32), "PROD", "Cumulative product"),
    "cummax": (_cummax, lambda x, a: np.maximum.accumulate(x, axis=a), "MAX", "Running max (cummax's values)"),
    "cummin": (lambda x, a: -_cummax(-x, a), lambda x, a: np.minimum.accumulate(x, axis=a), "MIN",
               "Running min (cummin's values)"),
    "logcumsumexp": (_logcumsumexp, None, "LOGADDEXP", "log(cumsum(exp(x))) (float32 only)"),
}


def _scan_reference(name):
    def reference(x, *, dim):
        x = np.asarray(x)
        if x.ndim == 0:
            return x.copy()
        f, i = _SCANS[name][:2]
        with np.errstate(over="ignore", invalid="ignore"):
            return f(x.astype(np.float32), dim % x.ndim) if x.dtype.kind == "f" else i(x.astype(np.int32), dim % x.ndim)
    return reference


def _scan_decline(node, tensors):
    x, y = tensors[node.inputs[0]].dtype, tensors[node.outputs[0]].dtype
    kinds = ("float32", "int32") if _SCANS[node.op][1] is not None else ("float32",)
    if x != y or x not in kinds:
        return f"{node.op}: {x} -> {y} (the kernel takes {' or '.join(kinds)} to the same)"
    return None


def _scan_build(ctx, node):
    kind = ("F_" if ctx.spec(node.inputs[0]).dtype == "float32" else "I_") + _SCANS[node.op][2]
    return [_along_dispatch(ctx, node, "cumsum", node.attrs["dim"], [kind])]


for _name, (_f, _i, _stem, _what) in _SCANS.items():
    register_op(type(_name, (), {
        "name": _name, "shaders": ("cumsum",), "reference": staticmethod(_scan_reference(_name)),
        "build": staticmethod(_scan_build), "decline": staticmethod(_scan_decline),
        "__doc__": f"{_what} along dim: float32 or int32 (wrapping), the dtype kept."}))


def _cumulative_index(largest):
    """cummax / cummin's indices, ATen's loop: a value takes the running extreme where it is a
    NaN or (the extreme not a NaN) >= it (<= for the min): equal values move the index on."""
    def reference(x, *, dim):
        x = np.asarray(x)
        if x.ndim == 0:
            return np.zeros((), np.int32)
        x = np.moveaxis(x.astype(np.float32 if x.dtype.kind == "f" else np.int32), dim % x.ndim, -1)
        out = np.zeros(x.shape, np.int32)
        best, index = x[..., 0].copy(), np.zeros(x.shape[:-1], np.int32)
        with np.errstate(invalid="ignore"):
            for k in range(x.shape[-1]):
                v = x[..., k]
                taken = np.isnan(v) | (~np.isnan(best) & ((v >= best) if largest else (v <= best))) \
                    if x.dtype.kind == "f" else ((v >= best) if largest else (v <= best))
                best, index = np.where(taken, v, best), np.where(taken, k, index)
                out[..., k] = index
        return np.moveaxis(out, -1, dim % x.ndim)
    return reference


def _index_decline(node, tensors):
    x, y = tensors[node.inputs[0]].dtype, tensors[node.outputs[0]].dtype
    if x not in ("float32", "int32") or y != "int32":
        return f"{node.op}: {x} -> {y} (the kernel takes float32 or int32 to int32 indices)"
    return None


def _index_build(ctx, node):
    extreme = {"cummax_indices": "MAX", "cummin_indices": "MIN"}[node.op]
    kind = ("F_" if ctx.spec(node.inputs[0]).dtype == "float32" else "I_") + extreme + "_INDEX"
    return [_along_dispatch(ctx, node, "cumsum", node.attrs["dim"], [kind])]


for _name in ("cummax_indices", "cummin_indices"):
    register_op(type(_name, (), {
        "name": _name, "shaders": ("cumsum",), "reference": staticmethod(_cumulative_index(_name == "cummax_indices")),
        "build": staticmethod(_index_build), "decline": staticmethod(_index_decline),
        "__doc__": f"{_name[:6]}'s indices along dim: float32 or int32 in, int32 out."}))


def _along(ctx, node, dim):
    """(outer, D, inner) of x around dim (dim None: everything as one row)."""
    shape = ctx.spec(node.inputs[0]).shape
    return _rows(shape, dim) if dim is not None else (1, _numel(shape), 1)


def _along_dispatch(ctx, node, shader, dim, defines):
    """One invocation a row of x along dim (push: rows, D, inner); DeviceLimit where a row's
    loop passes the device's loop budget (llvmpipe: 65535 iterations; the node runs on the CPU)."""
    x, y = node.inputs[0], node.outputs[0]
    outer, d, inner = _along(ctx, node, dim)
    rows = outer * inner
    ctx.device.info.check_loop_budget(d, f"{node.op}: rows of {d} values, one loop iteration each")
    return ctx.device.dispatch(shader, [ctx.buffer(x), ctx.buffer(y)], grid_1d(rows, LOCAL), local=(LOCAL,),
                               push=(rows, d, inner), defines=defines)


def _arg_reference(fn):
    def reference(x, *, dim=None, keepdim=False):
        x = np.asarray(x)          # (numpy's argmax / argmin give the first NaN, as torch's)
        out = np.asarray(fn(x.reshape(-1), axis=0) if dim is None else fn(x, axis=dim), np.int32)
        if keepdim:
            out = out.reshape((1,) * x.ndim) if dim is None else np.expand_dims(out, dim % x.ndim)
        return out
    return reference


def _arg_decline(node, tensors):
    x = tensors[node.inputs[0]]
    if x.dtype not in ("float32", "int32") or tensors[node.outputs[0]].dtype != "int32":
        return f"{node.op}: {x.dtype} values (the kernel takes float32 or int32)"
    return None


def _arg_build(ctx, node):
    kind = ["MAX" if node.op == "argmax" else "MIN"] + (["INT"] if ctx.spec(node.inputs[0]).dtype == "int32" else [])
    dim = node.attrs.get("dim")
    outer, d, inner = _along(ctx, node, dim)
    if d >= ROW_MIN and outer * inner <= ROW_MAX_ROWS:     # few long rows: a workgroup a row (ROW)
        rows = outer * inner
        ctx.device.info.check_loop_budget(-(-d // ROW_LOCAL) + 8, f"{node.op}: rows of {d} values")
        return [ctx.device.dispatch("argmax", [ctx.buffer(node.inputs[0]), ctx.buffer(node.outputs[0])], (rows, 1, 1),
                                    local=(ROW_LOCAL,), push=(rows, d, inner), defines=kind + ["ROW"])]
    return [_along_dispatch(ctx, node, "argmax", dim, kind)]


@register_op
class Argsort:
    """Stable argsort along `dim` (descending or not): float32 or int32 values -> int32 indices;
    a NaN after every number ascending, before them descending (torch's sort); equal values in
    their order (torch's stable=True: its default sort may order ties otherwise)."""
    name = "argsort"
    shaders = ("argsort",)

    @staticmethod
    def reference(x, *, dim, descending=False):
        x = np.asarray(x)
        if x.ndim == 0:
            return np.zeros((), np.int32)
        moved = np.moveaxis(x, dim, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        out = np.empty(flat.shape, np.int32)
        for r, row in enumerate(flat):
            nan = np.isnan(row) if row.dtype.kind == "f" else np.zeros(row.shape, bool)
            key = row.astype(np.float64 if row.dtype.kind == "f" else np.int64)
            key = np.where(nan, 0, -key if descending else key)
            out[r] = np.lexsort((np.arange(row.size), key, ~nan if descending else nan))   # the last key first
        return np.moveaxis(out.reshape(moved.shape), -1, dim)

    @staticmethod
    def decline(node, tensors):
        x, y = tensors[node.inputs[0]], tensors[node.outputs[0]]
        if x.dtype not in ("float32", "int32") or y.dtype != "int32":
            return f"argsort: {x.dtype} values (the kernel takes float32 or int32)"
        return None

    @staticmethod
    def build(ctx, node):
        x, y = node.inputs[0], node.outputs[0]
        shape = ctx.spec(x).shape
        _, d, inner = _rows(shape, node.attrs["dim"])
        ctx.device.info.check_loop_budget(d, f"{node.op}: rows of {d} values, one loop iteration each")
        n = _numel(shape)
        defines = ["DESC" if node.attrs.get("descending") else "ASC"] + (["INT"] if ctx.spec(x).dtype == "int32" else [])
        return [ctx.device.dispatch("argsort", [ctx.buffer(x), ctx.buffer(y)], grid_1d(-(-n // PER), LOCAL),
                                    local=(LOCAL,), spec=(PER,), push=(n, d, inner), defines=defines)]


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    register_op(type(_name, (), {
        "name": _name, "shaders": ("argmax",), "reference": staticmethod(_arg_reference(_fn)),
        "build": staticmethod(_arg_build), "decline": staticmethod(_arg_decline),
        "__doc__": f"{_name} along dim (None: over all), int32 indices (torch's, as int64 ids are int32 here)."}))
