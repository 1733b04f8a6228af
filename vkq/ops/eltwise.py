"""Elementwise int8 ops on packed tensors: add_q8, mul_q8, clamp_q8.

Inputs and output share one shape and one packed layout. The kernels read and write whole
ivec4 blocks (16 values) and need not know the layout: in every one (4W4C, 4H4W, and ROW for
ranks 5 and 6), a block is 4 words x 4 bytes and only the block's position says which bytes are
padding (block_geometry, block_mask.glsl).

Every op is integer-only: an int32 accumulator, then vkq.quant.requantize (the GLSL twin in
shaders/include/requant.glsl). Each op has a `*_params` helper that turns float scales and zero
points (and a fused activation) into its integer attrs.
"""
from __future__ import annotations

import numpy as np

from .. import packing
from ..device import grid_1d
from ..quant import (INT8_MAX, INT8_MIN, activation_bounds, quantize_multiplier, requant_clamp_params,
                     requant_tie_free, requantize)
from ..registry import register_op

LOCAL = 64
PER = 4                  # ivec4 blocks per invocation (fewer, longer invocations run faster on CPU drivers)
ADD_MAX_SHIFT = 30       # add_q8's rounding shift (add_q8_params)
INT32_MAX = (1 << 31) - 1
ADD_BITS = 22            # with a general multiplier: the larger input scale is 2^22 units
IDENTITY = (1 << 30, 30)  # quantize_multiplier(1.0)


def _requant_consts(multiplier, shift) -> list[int]:
    """(bound, lshift, m, rshift) of requantize_clamped for one (m, s) (requant.glsl)."""
    return [int(v[0]) for v in requant_clamp_params(multiplier, shift)]


def block_geometry(spec) -> tuple[int, int, int, int, int]:
    """(blocks, byte_dim, byte_blocks, word_dim, word_blocks) of a packed int8 tensor: the
    number of ivec4 blocks and the dims its bytes and words run along (block_mask.glsl); for ROW
    (numel, 0, 0, 0) after the blocks: its padding is at the end only."""
    if spec.layout == "ROW":
        return (spec.device_words() // 4, int(np.prod(spec.shape, dtype=np.int64)), 0, 0, 0)
    n, c, h, w = packing.as_nchw(spec.shape)
    byte_dim, word_dim = (c, w) if spec.layout == "4W4C" else (w, h)
    return (spec.device_words() // 4, byte_dim, -(-byte_dim // 4), word_dim, -(-word_dim // 4))


def _check_zp(*zps):
    for zp in zps:
        if not INT8_MIN <= int(zp) <= INT8_MAX:
            raise ValueError(f"int8 zero point must be in [-128, 127], got {zp}")


def _out_attrs(out_scale, out_zp, activation, bounds) -> dict:
    qmin, qmax = activation_bounds(activation, out_scale, out_zp, bounds)
    return {"out_zp": int(out_zp), "qmin": qmin, "qmax": qmax}


def _same_shapes(*arrays):
    shapes = {np.shape(a) for a in arrays}
    if len(shapes) != 1:
        raise ValueError(f"elementwise int8 ops need inputs of one shape, got {sorted(shapes)}")


def _int32(q, zp) -> np.ndarray:
    return np.asarray(q).astype(np.int64) - int(zp)


def add_q8_params(a_scale, a_zp, b_scale, b_zp, out_scale, out_zp, activation=None, bounds=None) -> dict:
    """Attrs of add_q8: a + b with their own qparams, requantized to (out_scale, out_zp).

    The weights carry the whole rescale: a_mult = round(2^S s_a / s_out), b_mult likewise, and
    the multiplier is 2^-S, so requantize only rounds (the kernel shifts instead of multiplying:
    add_shift_only). S is the largest (at most 30) that keeps 255 (a_mult + b_mult) + 2^(S-1),
    the largest sum the kernel forms, in int32: 22 where the scales are alike. The weights'
    rounding moves a sum by at most 255 * 2^-S of an output step (6e-5 at S = 22; PT2E's float32
    arithmetic moves it by about as much). Only when an input scale is so far above the output's
    that no S >= 1 fits (about 2^22 times) do the inputs go onto the common scale
    max(s_a, s_b) / 2^22 with a general multiplier."""
    _check_zp(a_zp, b_zp, out_zp)
    ra, rb = float(a_scale) / float(out_scale), float(b_scale) / float(out_scale)
    for shift in range(ADD_MAX_SHIFT, 0, -1):
        wa, wb = round(ra * 2.0 ** shift), round(rb * 2.0 ** shift)
        if 255 * (wa + wb) + (1 << (shift - 1)) < INT32_MAX:
            m, s = quantize_multiplier(2.0 ** -shift)
            break
    else:
        big = max(float(a_scale), float(b_scale))
        bits = ADD_BITS
        while bits > 0 and big / (2.0 ** bits * float(out_scale)) < 2.0 ** -31:
            bits -= 1
        unit = big / 2.0 ** bits
        wa, wb = round(float(a_scale) / unit), round(float(b_scale) / unit)
        m, s = quantize_multiplier(unit / float(out_scale))
    return {"a_zp": int(a_zp), "b_zp": int(b_zp), "a_mult": int(wa), "b_mult": int(wb),
            "multiplier": m, "shift": s, **_out_attrs(out_scale, out_zp, activation, bounds)}


def add_shift_only(attrs) -> tuple[int, int, bool] | None:
    """(shift S, offset, ties) where add_q8's requantize is a rounding shift (multiplier 2^-S, as
    add_q8_params makes it) whose sums fit int32, else None (the kernel's 64-bit requantize).
    The kernel then computes
        acc = a * a_mult + b * b_mult + offset,  offset = 2^(S-1) - 1 - a_zp * a_mult - b_zp * b_mult
        out = clamp(((acc + ((acc >> S) & ties)) >> S) + out_zp, qmin, qmax)
    which is requantize's round_half_even(((a - a_zp) * a_mult + (b - b_zp) * b_mult) / 2^S)
    (adding the floor's parity turns round-half-down into half to even). Every pair of int8
    inputs is checked on the host: that acc fits int32 (int32 products and sums wrap, so only
    the final value matters), and whether some pair lands exactly half way (ties False: the
    parity term is not needed)."""
    m, s = int(attrs["multiplier"]), int(attrs["shift"])
    wa, wb, za, zb = (int(attrs[k]) for k in ("a_mult", "b_mult", "a_zp", "b_zp"))
    shift = s - 30
    qmin, qmax = int(attrs.get("qmin", INT8_MIN)), int(attrs.get("qmax", INT8_MAX))
    if m != 1 << 30 or not 1 <= shift <= ADD_MAX_SHIFT or not INT8_MIN <= qmin <= qmax <= INT8_MAX:
        return None        # (outside int8, requantize's saturation at 2^16 could show)
    q = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)
    v = ((q - za) * wa)[:, None] + ((q - zb) * wb)[None, :]
    offset = (1 << (shift - 1)) - 1 - za * wa - zb * wb
    half = 1 << (shift - 1)
    if abs(offset) >= INT32_MAX or v.max() + half >= INT32_MAX or v.min() + half - 1 < -INT32_MAX:
        return None
    ties = bool(((v & ((1 << shift) - 1)) == half).any())
    return shift, offset, ties


def mul_q8_params(a_scale, a_zp, b_scale, b_zp, out_scale, out_zp, activation=None, bounds=None) -> dict:
    """Attrs of mul_q8: the product's real multiplier is s_a * s_b / s_out."""
    _check_zp(a_zp, b_zp, out_zp)
    m, s = quantize_multiplier(float(a_scale) * float(b_scale) / float(out_scale))
    return {"a_zp": int(a_zp), "b_zp": int(b_zp), "multiplier": m, "shift": s,
            **_out_attrs(out_scale, out_zp, activation, bounds)}


def clamp_q8_params(in_scale, in_zp, out_scale, out_zp, activation="relu", bounds=None) -> dict:
    """Attrs of clamp_q8: relu / relu6 / hardtanh(bounds) as (qmin, qmax) in the output's
    quantization, plus the rescale s_in / s_out (exactly 1 when the qparams are equal)."""
    _check_zp(in_zp, out_zp)
    m, s = quantize_multiplier(float(in_scale) / float(out_scale))
    return {"in_zp": int(in_zp), "multiplier": m, "shift": s,
            **_out_attrs(out_scale, out_zp, activation, bounds)}


def _binary_build(ctx, node, variant, a_mult=0, b_mult=0):
    a, b, out = node.inputs[0], node.inputs[1], node.outputs[0]
    so, at = ctx.spec(out), node.attrs
    for t in (a, b):
        st = ctx.spec(t)
        if st.shape != so.shape or st.layout != so.layout:
            raise ValueError(f"{node.name}: {t!r} is {st.shape} {st.layout}, the output {so.shape} {so.layout}")
    blocks, *geo = block_geometry(so)
    fast = add_shift_only(at) if variant == "OP_ADD" else None
    if fast:
        shift, offset, ties = fast
    else:
        shift, offset = 0, 0
        ties = not requant_tie_free(at["multiplier"], at["shift"])   # False: the shader skips the tie test
    return [ctx.device.dispatch(
        "eltwise_binary", [ctx.buffer(a), ctx.buffer(b), ctx.buffer(out)], grid_1d(-(-blocks // PER), LOCAL),
        local=(LOCAL,), spec=(PER, *geo, int(ties), int(fast is not None)), defines=[variant],
        push=(blocks, at["a_zp"], at["b_zp"], a_mult, b_mult, _requant_consts(at["multiplier"], at["shift"]),
              at["out_zp"], at.get("qmin", INT8_MIN), at.get("qmax", INT8_MAX), offset, shift))]


@register_op
class AddQ8:
    """int8 a + int8 b -> int8 (attrs from add_q8_params):
        acc = (a - a_zp) * a_mult + (b - b_zp) * b_mult        exact in int32
        out = requantize(acc, multiplier, shift, out_zp, qmin, qmax)
    a_mult / b_mult put both inputs on one integer scale, so the only rounding is the final one
    (TFLite instead shifts left by 20 and rounds twice more, because its multiply keeps only the
    high 32 bits; requant.glsl's multiply is exact on the 64-bit product)."""
    name = "add_q8"
    shaders = ("eltwise_binary",)
    layouts = packing.ALL_LAYOUTS

    def reference(a, b, *, a_zp, b_zp, a_mult, b_mult, multiplier, shift, out_zp,
                  qmin=INT8_MIN, qmax=INT8_MAX):
        _same_shapes(a, b)
        acc = _int32(a, a_zp) * a_mult + _int32(b, b_zp) * b_mult
        return requantize(acc, multiplier, shift, out_zp, qmin, qmax)

    def build(ctx, node):
        return _binary_build(ctx, node, "OP_ADD", node.attrs["a_mult"], node.attrs["b_mult"])


def channel_operand(a_shape, b_shape) -> bool:
    """b (N or 1, C, 1, 1) scales each channel of a (N, C, H, W): squeeze-excitation's gate."""
    return len(a_shape) == 4 and len(b_shape) == 4 and b_shape[0] in (1, a_shape[0]) \
        and tuple(b_shape[1:]) == (a_shape[1], 1, 1)


@register_op
class MulQ8:
    """int8 a * int8 b -> int8 (attrs from mul_q8_params):
        acc = (a - a_zp) * (b - b_zp)                          |acc| <= 255^2
        out = requantize(acc, multiplier, shift, out_zp, qmin, qmax),  M = s_a * s_b / s_out
    b has a's shape, or is a per-channel (N or 1, C, 1, 1) operand broadcast over H x W."""
    name = "mul_q8"
    shaders = ("eltwise_binary", "eltwise_mul_channel")
    layouts = packing.ALL_LAYOUTS       # (ROW: rank 5 and 6, so never the channel operand's case)

    def reference(a, b, *, a_zp, b_zp, multiplier, shift, out_zp, qmin=INT8_MIN, qmax=INT8_MAX):
        if not channel_operand(np.shape(a), np.shape(b)):
            _same_shapes(a, b)
        acc = _int32(a, a_zp) * _int32(b, b_zp)
        return requantize(acc, multiplier, shift, out_zp, qmin, qmax)

    def build(ctx, node):
        sa, sb = ctx.spec(node.inputs[0]), ctx.spec(node.inputs[1])
        if sa.shape == sb.shape:
            return _binary_build(ctx, node, "OP_MUL")
        return _mul_channel_build(ctx, node)


def _mul_channel_build(ctx, node):
    a, b, out = node.inputs[0], node.inputs[1], node.outputs[0]
    sa, sb, so, at = ctx.spec(a), ctx.spec(b), ctx.spec(out), node.attrs
    if not channel_operand(sa.shape, sb.shape) or sa.shape != so.shape or not sa.layout == sb.layout == so.layout:
        raise ValueError(f"{node.name}: {sa.shape} {sa.layout} * {sb.shape} {sb.layout} -> {so.shape} {so.layout}")
    blocks, *geo = block_geometry(so)
    n, c, h, w = sa.shape
    per_n = blocks // n
    per_s = -(-c // 4) if so.layout == "4W4C" else per_n // c
    ties = not requant_tie_free(at["multiplier"], at["shift"])
    return [ctx.device.dispatch(
        "eltwise_mul_channel", [ctx.buffer(a), ctx.buffer(b), ctx.buffer(out)], grid_1d(-(-blocks // PER), LOCAL),
        local=(LOCAL,), spec=(PER, *geo, per_n, per_s, int(sb.shape[0] == n), int(ties)),
        defines=["GATE_" + so.layout],
        push=(blocks, at["a_zp"], at["b_zp"], _requant_consts(at["multiplier"], at["shift"]),
              at["out_zp"], at.get("qmin", INT8_MIN), at.get("qmax", INT8_MAX)))]


@register_op
class ClampQ8:
    """Standalone relu / relu6 / hardtanh on int8 (attrs from clamp_q8_params):
        out = requantize(q - in_zp, multiplier, shift, out_zp, qmin, qmax),  M = s_in / s_out
    With equal qparams M = 1 exactly and this is clamp(q, qmin, qmax); the kernel then skips the
    multiply (same result, bit for bit)."""
    name = "clamp_q8"
    shaders = ("eltwise_clamp",)
    layouts = packing.ALL_LAYOUTS

    def reference(q, *, in_zp, multiplier, shift, out_zp, qmin=INT8_MIN, qmax=INT8_MAX):
        return requantize(_int32(q, in_zp), multiplier, shift, out_zp, qmin, qmax)

    def build(ctx, node):
        src, out = node.inputs[0], node.outputs[0]
        si, so = ctx.spec(src), ctx.spec(out)
        if si.shape != so.shape or si.layout != so.layout:
            raise ValueError(f"{node.name}: input {si.shape} {si.layout} vs output {so.shape} {so.layout}")
        return [clamp_dispatch(ctx.device, ctx.buffer(src), ctx.buffer(out), so, node.attrs)]


def clamp_dispatch(device, src, dst, spec, attrs):
    """The clamp_q8 dispatch from buffer src to dst, both holding a packed int8 tensor `spec`
    (attrs as clamp_q8_params gives them)."""
    requant = (attrs["multiplier"], attrs["shift"]) != IDENTITY or attrs["in_zp"] != attrs["out_zp"]
    blocks, *geo = block_geometry(spec)
    return device.dispatch(
        "eltwise_clamp", [src, dst], grid_1d(-(-blocks // PER), LOCAL),
        local=(LOCAL,), spec=(PER, *geo), defines=["REQUANT"] if requant else None,
        push=(blocks, attrs["in_zp"], _requant_consts(attrs["multiplier"], attrs["shift"]), attrs["out_zp"],
              attrs.get("qmin", INT8_MIN), attrs.get("qmax", INT8_MAX)))
