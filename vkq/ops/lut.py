"""lut_q8: any elementwise function of one int8 tensor, as a 256-entry table.

    out = table[q + 128]          table: int8 (256,), the output for each input value -128..127

With the input's and the output's quantization fixed, f(x) for int8 x has 256 possible inputs:
the lowering evaluates the float function on all of them at compile time, exactly as PT2E does
(dequantize in float32, the aten op in float32, quantize with round-half-even and clamp:
vkq.passes.fold_qdq_patterns.unary_table), so the op is bit-exact with PT2E by construction
and the runner needs no torch. TFLite and XNNPACK compute hardswish, sigmoid, tanh and gelu on
int8 this way. The kernel is layout-agnostic: each byte of a packed word is looked up on its
own; padding bytes are written 0 (block_mask.glsl), as the other elementwise kernels do.
"""
from __future__ import annotations

import numpy as np

from .. import packing
from ..device import grid_1d
from ..registry import register_op
from .eltwise import LOCAL, PER, block_geometry


def _check_table(table, who: str = "lut_q8") -> np.ndarray:
    t = np.asarray(table)
    if t.shape != (256,) or t.dtype != np.int8:
        raise ValueError(f"{who} needs an int8 table of 256 entries, got {t.dtype} {t.shape}")
    return t


def device_table(table, who: str = "lut_q8") -> np.ndarray:
    """The shaders' form, (256, 4) int32: row u (the input's unsigned byte) holds the output's
    unsigned byte at each byte position, (t, t << 8, t << 16, t << 24), so a word is four
    lookups OR-ed (shaders/lut_q8.comp); the fused epilogues read component 0
    (shaders/include/lut_lookup.glsl). One form for both: each kernel's texel variant takes the
    table as whole texels."""
    t = _check_table(table, who)
    by_byte = np.roll(t, -128).view(np.uint8).astype(np.uint32)   # index u = q & 0xFF: q = 0..127, then -128..-1
    return (by_byte[:, None] << np.uint32([0, 8, 16, 24])).view(np.int32)


@register_op
class LutQ8:
    """int8 q -> int8 table[q + 128] (table: int8 (256,), a constant input). Any packed layout;
    input and output share shape and layout."""
    name = "lut_q8"
    shaders = ("lut_q8",)
    layouts = packing.ALL_LAYOUTS

    def reference(q, table):
        t = _check_table(table)
        return t[np.asarray(q).astype(np.int16) + 128]

    def build(ctx, node):
        src, table, out = node.inputs[0], node.inputs[1], node.outputs[0]
        si, so = ctx.spec(src), ctx.spec(out)
        if si.shape != so.shape or si.layout != so.layout:
            raise ValueError(f"{node.name}: input {si.shape} {si.layout} vs output {so.shape} {so.layout}")
        blocks, *geo = block_geometry(so)
        return [ctx.device.dispatch(
            "lut_q8", [ctx.buffer(src), ctx.const_buffer(device_table(ctx.constant(table))), ctx.buffer(out)],
            grid_1d(-(-blocks // PER), LOCAL), local=(LOCAL,), spec=(PER,), push=(geo, blocks))]
