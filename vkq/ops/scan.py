"""Scans: cumulative sums along one dim (shaders/cumsum.comp).

  cumsum(x; dim, dtype)     x int32 (ids, bool masks) or float32 -> dtype ("int32" or
                            "float32"): int32 sums wrap; an int32 x summed to float32 is summed
                            exactly in int32 and rounded once; float32 sums are compensated

What it is for: position ids computed from the input (RoBERTa's cumsum of its padding mask,
Llama's from its attention mask) and DETR's sine positions (a cumsum of the mask as floats).
They ran in torch on the CPU, so a saved program needed torch to run.
"""
from __future__ import annotations

import numpy as np

from ..device import grid_1d
from ..registry import register_op
from ..vkinfo import DeviceLimit
from .float import LOCAL, _numel

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
        if x.dtype.kind == "f":      # torch sums floats in double on the CPU
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
        shape = ctx.spec(x).shape
        outer, d, inner = _rows(shape, node.attrs["dim"])
        budget = ctx.device.info.loop_budget
        if budget is not None and d > budget:
            raise DeviceLimit(f"cumsum: rows of {d} values, one loop iteration each, past "
                              f"{ctx.device.info.name}'s loop limit of {budget}")
        rows = outer * inner
        variant = _VARIANT[(ctx.spec(x).dtype, ctx.spec(y).dtype)]
        return [ctx.device.dispatch("cumsum", [ctx.buffer(x), ctx.buffer(y)], grid_1d(rows, LOCAL),
                                    local=(LOCAL,), push=(rows, d, inner), defines=[variant])]
