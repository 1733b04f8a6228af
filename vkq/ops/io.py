"""Crossing between float and packed int8 (any packed layout; repack, between layouts, is in
vkq.ops.shape), and the round trip through int8 that stays float (fake_quantize)."""
from __future__ import annotations

import numpy as np

from .. import packing
from ..device import MAX_GROUPS, grid_1d, invocation_rows
from ..quant import INT8_MAX, INT8_MIN, dequantize, fake_quant_push, fake_quantize, inverse_scale, quantize
from ..registry import register_op

LOCAL = 64
FQ_PER = 4        # fake_quantize: vec4 blocks an invocation (as the float elementwise kernels)


def _nchw(spec):
    return packing.shader_nchw(spec.shape, spec.layout)


def _io_dispatch(ctx, shader, buffers, spec, push, pairs: bool = False):
    """One quantize/dequantize dispatch. VEC (an ivec4 block an invocation, float vec4s) where
    every vec4 of the float side lies within one row:
    W % 4 == 0 for the blocked layouts, numel % 4 == 0 for ROW. A 4W4C VEC dispatch is a GRID
    of (width blocks, channel blocks, N*H / rows), each invocation running down `rows` of the
    (image, row) pairs (device.invocation_rows), which gives it its blocks without a division
    (int8x4.glsl: io_blocks), where those counts fit a grid's dimensions. pairs (dequantize): a
    GRID invocation takes two width blocks where W % 8 == 0, W >= 16 and the device stores 32
    bytes at once (Device.wide_stores), each channel's 8 floats one store (PAIR)."""
    n, c, h, w = _nchw(spec)
    vec = (n * c * h * w if spec.layout == "ROW" else w) % 4 == 0
    words = spec.device_words()
    defines, groups, local = ["VEC"] if vec else [], grid_1d(words // 4 if vec else words, LOCAL), LOCAL
    w4, c4 = -(-w // 4), -(-c // 4)
    rows, pair = 1, 0    # (unused by the other variants)
    if vec and spec.layout == "4W4C" and c4 <= MAX_GROUPS:
        # (from 16 columns: at 8 the one lane left a row took 1.1-1.2x the time on lavapipe)
        pair = int(pairs and w % 8 == 0 and w >= 16 and ctx.device.wide_stores)
        lanes = w4 >> pair              # invocations along the width
        # a power of two >= those, at least 8 and a whole subgroup (a GPU warp is never split)
        local = min(LOCAL, max(1 << max(3, (lanes - 1).bit_length()), ctx.device.info.subgroup_size))
        gx = -(-lanes // local)
        rows = max(invocation_rows(ctx.device.info, gx * c4, n * h), -(-n * h // MAX_GROUPS))   # z within the limit
        defines, groups = ["VEC", "GRID"], (gx, c4, -(-n * h // rows))
    return ctx.device.dispatch(shader, buffers, groups, local=(local,),
                               spec=(packing.LAYOUT_IDS[spec.layout], rows) + ((pair,) if pairs else ()),
                               push=((n, c, h, w), *push), defines=defines)


@register_op
class Quantize:
    """float32 -> int8 per tensor (round half to even, clamp), written packed in the
    output's layout. Bit-exact with quantized_decomposed.quantize_per_tensor."""
    name = "quantize"
    shaders = ("quantize",)
    layouts = packing.ALL_LAYOUTS

    def reference(x, *, scale, zero_point, qmin=INT8_MIN, qmax=INT8_MAX):
        return quantize(x, scale, zero_point, qmin, qmax)

    def build(ctx, node):
        x, q = node.inputs[0], node.outputs[0]
        spec, a = ctx.spec(q), node.attrs
        return [_io_dispatch(ctx, "quantize", [ctx.buffer(x), ctx.buffer(q)], spec,
                             (inverse_scale(a["scale"]), a["zero_point"], a.get("qmin", INT8_MIN), a.get("qmax", INT8_MAX)))]


@register_op
class Dequantize:
    """int8 (packed) -> float32 per tensor: (q - zero_point) * scale."""
    name = "dequantize"
    shaders = ("dequantize",)
    layouts = packing.ALL_LAYOUTS

    def reference(q, *, scale, zero_point):
        return dequantize(q, scale, zero_point)

    def build(ctx, node):
        q, x = node.inputs[0], node.outputs[0]
        spec, a = ctx.spec(q), node.attrs
        return [_io_dispatch(ctx, "dequantize", [ctx.buffer(q), ctx.buffer(x)], spec,
                             (np.float32(a["scale"]), a["zero_point"]), pairs=True)]


@register_op
class FakeQuantize:
    """float32 -> float32: dequantize(quantize(x)) per tensor, PT2E's quantize / dequantize pair
    where nothing else reads the int8 value (passes/fake_quantize.py), in one pass over float
    rows (shaders/fake_quantize.comp), bit for bit the two ops'."""
    name = "fake_quantize"
    shaders = ("fake_quantize",)

    def reference(x, *, scale, zero_point, qmin=INT8_MIN, qmax=INT8_MAX):
        return fake_quantize(x, scale, zero_point, qmin, qmax)

    def build(ctx, node):
        x, y = node.inputs[0], node.outputs[0]
        sx, sy, a = ctx.spec(x), ctx.spec(y), node.attrs
        if sx.dtype != "float32" or sy.dtype != "float32" or sx.shape != sy.shape:
            raise ValueError(f"{node.name}: fake_quantize takes float32 to float32 of one shape, "
                             f"got {sx.dtype} {sx.shape} -> {sy.dtype} {sy.shape}")
        n = int(np.prod(sy.shape, dtype=np.int64))
        return [ctx.device.dispatch("fake_quantize", [ctx.buffer(x), ctx.buffer(y)],
                                    grid_1d(-(-n // (4 * FQ_PER)), LOCAL), local=(LOCAL,), spec=(FQ_PER,),
                                    push=(n, *fake_quant_push(a)))]
