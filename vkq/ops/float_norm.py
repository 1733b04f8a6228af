"""Float32 normalisations and softmaxes (float_layer_norm.comp, float_softmax.comp): layer_norm,
group_norm, rms_norm, layer_norm_q8 (the static int8 graph's layer norm), softmax, softmax_masked
(attention's scores -> weights), log_softmax; how each matches its reference: vkq.ops.float's
docstring.

  layer_norm(x, weight, bias; normalized_shape, eps)     float_layer_norm
  group_norm(x, weight, bias; groups, eps)               float_layer_norm (a group a row)
  rms_norm(x, weight; normalized_shape, eps)             float_layer_norm (not centred, no bias)
  softmax / log_softmax(x; dim)                          float_softmax (LOG)
  softmax_masked(x, mask; scale)                         float_softmax (MASKED): softmax(x*scale + mask)
"""
from __future__ import annotations

import numpy as np

from .. import packing
from ..quant import inverse_scale, quantize
from ..registry import register_op
from .float import (F32, _check, _f, _numel, _op, _pad, _row_dispatch,
                    broadcast_strides, merge_dims)
from .float_math import NORM_PARTS, exp_f32, ftz, log_f32, recip_newton, rsqrt_newton, sum_canonical

ROW_LANE_SOFTMAX = 128         # lane_max of softmax (not the masked one: attention's rows must give the
                               # same bits at any padded length, so one path for every length)
ROW_LANE_NORM = 512            # lane_max of layer / group norm


def _norm_rows(rows, w, b, eps, center):
    """float_layer_norm.comp's float32 steps on rows (R, D) with per-value weights and biases
    w, b (R or 1, D) (b None: rms_norm), bit for bit (the shader's comment gives them)."""
    rows = ftz(rows)
    inv_d = F32(1.0 / rows.shape[1])
    mean = ftz(sum_canonical(rows) * inv_d)[:, None] if center else None
    d = ftz(rows - mean) if center else rows
    t = ftz(sum_canonical(ftz(d * d)) * inv_d) + F32(eps)
    k = np.where(np.isinf(t), F32(0), rsqrt_newton(t)).astype(F32)[:, None]
    y = ftz(ftz(d * k) * ftz(w))
    return y if b is None else ftz(y + ftz(b))


def layer_norm(x, weight, bias, *, normalized_shape, eps=1e-5):
    """torch's layer_norm over the trailing dims, (x - mean) / sqrt(var + eps) * weight + bias
    (the biased variance), as one sequence of float32 steps that every device computes bit for
    bit (float_exact.glsl; float_layer_norm.comp gives them): canonical sums, two passes (the
    mean, then the squared deviations), rsqrt_newton. Within a few ulp of float64's layer norm
    (tests/test_exact_float.py)."""
    x = _f(x)
    d = _numel(normalized_shape)
    y = _norm_rows(x.reshape(-1, d), _f(weight).reshape(1, d), _f(bias).reshape(1, d), eps, True)
    return y.reshape(x.shape)


def rms_norm(x, weight, *, normalized_shape, eps):
    """torch's rms_norm, x / sqrt(mean(x^2) + eps) * weight over the trailing dims, as one
    sequence of float32 steps that every device computes bit for bit (float_exact.glsl):
        ss = sum_squares_canonical(x),  mean = ftz(ss * f32(1/D)),  t = mean + eps
        r = rsqrt_newton(t) (0 where t is inf),  y = ftz(ftz(ftz(x) * r) * ftz(w))
    A row holding a NaN is NaN; one whose squares overflow: 0 where x is finite (as torch)."""
    x = _f(x)
    d = _numel(normalized_shape)
    return _norm_rows(x.reshape(-1, d), _f(weight).reshape(1, d), None, eps, False).reshape(x.shape)


def _softmax_rows(v, log=False):
    """float_softmax.comp's float32 steps on rows v (R, D), bit for bit: m = max v (order-free),
    e = ftz(exp_f32(v - m)) (0 below -87.33654), s = sum_canonical(e) (s in [1, D]), then
    y = ftz(e * recip_newton(s)), or (LOG) y = (v - m) - log_f32(s). A row holding a NaN is NaN."""
    m = v.max(axis=1, keepdims=True)
    d = v - m
    e = np.where(d < F32(-87.33654), F32(0), ftz(exp_f32(d))).astype(F32)
    s = sum_canonical(e)[:, None]
    return (d - log_f32(s)) if log else ftz(e * recip_newton(s))


def _along(x, dim, fn):
    """fn on x's rows along dim (moved last and back)."""
    x = np.moveaxis(_f(x), dim, -1)
    return np.moveaxis(fn(x.reshape(-1, x.shape[-1])).reshape(x.shape), -1, dim)


def softmax(x, *, dim=-1):
    """torch's softmax along dim, as float32 steps every device computes bit for bit
    (_softmax_rows); within 2 ulp + 1e-45 of float64's (tests/test_exact_float.py)."""
    return _along(x, dim, _softmax_rows)


def softmax_masked(x, mask, *, scale=1.0):
    """softmax(x * scale + mask) along the last dim, mask broadcast to x, the product and the sum
    rounded to float32 as the separate mul and add compute them (attention's scores -> weights)."""
    return softmax(_f(x) * F32(scale) + _f(mask), dim=-1)


def log_softmax(x, *, dim=-1):
    """log_softmax as float32 steps: (x - m) - log_f32(s) (_softmax_rows LOG)."""
    return _along(x, dim, lambda v: _softmax_rows(v, log=True))



def _layer_norm_build(ctx, node):
    """layer_norm, and rms_norm (no bias input) as the same shader with the centring compiled
    out (specialization constant 6) and its bias a constant of zeros."""
    _check(ctx, node)
    x, w, *b = node.inputs
    y = node.outputs[0]
    d = _numel(node.attrs["normalized_shape"])
    n = _numel(ctx.spec(x).shape)
    if _numel(ctx.spec(w).shape) != d or (b and _numel(ctx.spec(b[0]).shape) != d) or n % max(d, 1):
        raise ValueError(f"{node.name}: {node.op} weight/bias must have the normalized_shape's {d} values")
    rows = n // d
    bias = ctx.buffer(b[0]) if b else ctx.const_buffer(np.zeros(d, F32), F32)
    return [_row_dispatch(ctx, "float_layer_norm", [ctx.buffer(x), ctx.buffer(w), bias, ctx.buffer(y)],
                          rows, d, (rows, d, F32(node.attrs.get("eps", 1e-5)), 1, d, 1, *_NOT_Q8, F32(1.0 / d)),
                          vec4s=-(-d // 4), vec=d % 4 == 0, center=not not b, lane_max=ROW_LANE_NORM,
                          parts=NORM_PARTS // 4, passes=3 if b else 2, per_step=4)]


_NOT_Q8 = (1, F32(1.0), 0, F32(1.0), 0, -128, 127)     # float_layer_norm's Q8 push constants, unused


LAYER_NORM_Q8_MAX_D = (1 << 31) // (128 * 128)     # S2 = sum (x - x_zp)^2 stays an int32


def layer_norm_q8_constants(d: int, x_scale: float) -> tuple:
    """float32(1 / D^2), float32(x_scale^2), float32(x_scale / D): the host's share of
    layer_norm_q8, pushed to the shader as these bits."""
    return F32(1.0 / (d * d)), F32(float(x_scale) ** 2), F32(float(x_scale) / d)


def layer_norm_q8(x, weight, bias, *, normalized_shape, eps, x_scale, x_zp, out_scale, out_zp, qmin, qmax):
    """dequantize -> layer_norm -> quantize (the static int8 graph's float island) as one op,
    computed so that every device gives these bits (shaders/float_layer_norm.comp Q8): with
    e = x - x_zp, the row's S1 = sum e and D^2 var = D sum e^2 - S1^2 are integers (exact, in any
    order); then float32 steps, each correctly rounded:
        t = vd / D^2 * x_scale^2 + eps,  k = rsqrt_newton(t) * (x_scale / D)
        y = (e D - S1) * k * w + b,  quantized.
    PT2E's float32 layer norm rounds differently: within one step of it."""
    x = np.asarray(x)
    d = x.shape[-1]
    if _numel(normalized_shape) != d or d > LAYER_NORM_Q8_MAX_D:
        raise ValueError(f"layer_norm_q8 normalizes one last dim of at most {LAYER_NORM_Q8_MAX_D} values, "
                         f"got {list(normalized_shape)} of {x.shape}")
    inv_d2, x_scale2, x_scale_d = layer_norm_q8_constants(d, x_scale)
    e = x.astype(np.int64) - int(x_zp)
    s1 = e.sum(-1, keepdims=True)
    v = d * (e * e).sum(-1, keepdims=True) - s1 * s1
    hi, lo = v >> 32, v & 0xFFFFFFFF
    vd = (hi.astype(F32) * F32(2.0 ** 32) + (lo >> 16).astype(F32) * F32(65536.0)) + (lo & 0xFFFF).astype(F32)
    t = vd * inv_d2 * x_scale2 + F32(eps)
    k = rsqrt_newton(t) * x_scale_d
    y = (e * d - s1).astype(F32) * k * _f(weight).reshape(-1) + _f(bias).reshape(-1)
    return quantize(y, out_scale, out_zp, qmin, qmax)


def _layer_norm_q8_decline(node, tensors):
    shape, d = tensors[node.inputs[0]].shape, _numel(node.attrs["normalized_shape"])
    if len(shape) > 4 or len(node.attrs["normalized_shape"]) != 1 or d % 4 or d > LAYER_NORM_Q8_MAX_D:
        return (f"{node.op}: rank <= 4 and one normalized dim of a multiple of 4 values, at most "
                f"{LAYER_NORM_Q8_MAX_D}, got {shape} over {d}")
    return None


def _layer_norm_q8_build(ctx, node):
    x, w, b = node.inputs
    a = node.attrs
    n, c, h, d = packing.as_nchw(ctx.spec(x).shape)
    if _numel(ctx.spec(w).shape) != d or _numel(ctx.spec(b).shape) != d:
        raise ValueError(f"{node.name}: layer_norm_q8 weight/bias must have {d} values")
    rows = n * c * h
    push = (rows, d, F32(a["eps"]), 1, d, 1, h, F32(a["x_scale"]), a["x_zp"], inverse_scale(a["out_scale"]),
            a["out_zp"], a["qmin"], a["qmax"], *layer_norm_q8_constants(d, a["x_scale"]))
    return [_row_dispatch(ctx, "float_layer_norm", [ctx.buffer(x), ctx.buffer(w), ctx.buffer(b),
                                                    ctx.buffer(node.outputs[0])],
                          rows, d, push, defines=["Q8"], vec4s=d // 4, vec=True, center=True,
                          lane_max=ROW_LANE_NORM, passes=3 + (3 - ((h - 1) & 3)))]   # + zeroing the rows past H


@register_op
class LayerNormQ8:
    """Layer norm of an int8 tensor to an int8 tensor over its last dim (4H4W rows): the
    dequantize, the float layer norm and the quantize of PT2E's graph in one pass
    (float_layer_norm Q8; fold_qdq_patterns makes it). Integer row statistics and correctly
    rounded float32 steps: the same bits as the reference on every device."""
    name = "layer_norm_q8"
    shaders = ("float_layer_norm",)
    layouts = ("4H4W",)
    reference = staticmethod(layer_norm_q8)
    build = staticmethod(_layer_norm_q8_build)
    decline = staticmethod(_layer_norm_q8_decline)


def group_norm(x, weight, bias, *, groups, eps=1e-5):
    """Normalise each group of C/groups channels of each image over its channels and positions,
    then a per-channel affine (torch.nn.GroupNorm): layer_norm's float32 steps on each group's
    row of C/groups x H x W values, bit for bit on every device."""
    x = _f(x)
    n, c = x.shape[:2]
    hw = _numel(x.shape[2:])
    per = lambda v: np.repeat(_f(v).reshape(groups, c // groups), hw, axis=1)      # a value's channel's
    rows = x.reshape(n * groups, -1)
    w, b = np.tile(per(weight), (n, 1)), np.tile(per(bias), (n, 1))
    return _norm_rows(rows, w, b, eps, True).reshape(x.shape)


def _group_norm_build(ctx, node):
    _check(ctx, node)
    x, w, b = node.inputs
    shape, groups = ctx.spec(x).shape, node.attrs["groups"]
    n, c = shape[:2]
    hw = _numel(shape[2:])
    if c % groups or _numel(ctx.spec(w).shape) != c or _numel(ctx.spec(b).shape) != c:
        raise ValueError(f"{node.name}: group_norm of {c} channels in {groups} groups, weight/bias of {c}")
    rows, d = n * groups, c // groups * hw
    return [_row_dispatch(ctx, "float_layer_norm", [ctx.buffer(x), ctx.buffer(w), ctx.buffer(b),
                                                    ctx.buffer(node.outputs[0])],
                          rows, d, (rows, d, F32(node.attrs.get("eps", 1e-5)), groups, c // groups, hw, *_NOT_Q8,
                                    F32(1.0 / d)),
                          vec4s=-(-d // 4), vec=hw == 1 and d % 4 == 0, center=True, lane_max=ROW_LANE_NORM,
                          parts=NORM_PARTS // 4, passes=3, per_step=4)]


_NO_MASK = (1.0, 0, 0, [1, 1, 1], [0, 0, 0])   # scale, mrank, mj, mshape, mstride


def _softmax_build(defines):
    def build(ctx, node):
        _check(ctx, node)
        x, y = node.inputs[0], node.outputs[0]
        shape = ctx.spec(x).shape
        dim = node.attrs.get("dim", -1) % len(shape)
        d, inner = shape[dim], _numel(shape[dim + 1:])
        rows = _numel(shape) // max(d, 1)
        bufs = [ctx.buffer(x), ctx.buffer(y)]
        # float_softmax.comp: rows on vec4s (VEC 1); packed rows of other lengths through the
        # buffers' own vec4s where both are whole vec4s (VEC 3); else value by value
        vec = 0 if inner != 1 else 1 if d % 4 == 0 else 3 if all(b.size % 4 == 0 for b in bufs) else 0
        span = d + 3 * (vec == 3)      # VEC 3: a row's vec4s may start 3 words before it (the loop budget)
        # ROW_LANE: 4 rows a lane where float_softmax.comp's main() takes row_group (the same test)
        group = 4 if vec == 3 and d % 2 and d >= 5 else 1
        return [_row_dispatch(ctx, "float_softmax", bufs, rows, span, (rows, d, inner, F32(_NO_MASK[0]), *_NO_MASK[1:], d),
                              defines, -(-d // 4), vec, lane_max=ROW_LANE_SOFTMAX, lane_group=group,
                              parts=NORM_PARTS // 4, tail=True)]
    return build


def masked_softmax_dispatch(ctx, name, shape, mask_shape, scale, buffers, bool_mask=False, row_stride=None):
    """softmax(x * scale + mask) along the last dim of x (shape), mask broadcast; buffers
    (x, y, mask). bool_mask: the mask is int32 0/1 (1: attend; 0: -inf). row_stride: x's and
    y's rows that far apart (>= the row; attention pads them to a multiple of 4), else packed."""
    d, rows = shape[-1], _numel(shape[:-1])
    rs = d if row_stride is None else int(row_stride)
    st = broadcast_strides(mask_shape, shape)
    mshape, (mst,) = merge_dims(list(shape[:-1]), st[:-1]) if len(shape) > 1 else ([1], [[0]])
    if len(mshape) > 3:
        raise ValueError(f"{name}: the mask's row dims merge to {len(mshape)} (the shader takes 3)")
    # vec4 path (float_softmax.comp): rows starting on vec4s (a last part block is padding), the
    # mask's rows whole vec4s or broadcast along the row (1), else the mask read by words (2)
    vec = 0 if rs % 4 else 1 if st[-1] == 0 or (d % 4 == 0 and all(v % 4 == 0 for v in mst)) else 2
    push = (rows, d, 1, F32(scale), len(mshape), st[-1], _pad(mshape, 3, 1), _pad(mst, 3), rs)
    return _row_dispatch(ctx, "float_softmax", list(buffers), rows, d, push,
                         ("MASKED",) + (("BOOL_MASK",) if bool_mask else ()), -(-d // 4), vec,
                         parts=NORM_PARTS // 4, tail=True)


def _softmax_masked_build(ctx, node):
    _check(ctx, node)
    x, mask = node.inputs
    y = node.outputs[0]
    return [masked_softmax_dispatch(ctx, node.name, ctx.spec(x).shape, ctx.spec(mask).shape,
                                    node.attrs.get("scale", 1.0), [ctx.buffer(x), ctx.buffer(y), ctx.buffer(mask)])]



_op("layer_norm", layer_norm, _layer_norm_build, ("float_layer_norm",),
    "Float layer norm over the trailing normalized_shape dims (one workgroup a row).")
_op("rms_norm", rms_norm, _layer_norm_build, ("float_layer_norm",),
    "Float RMS norm over the trailing normalized_shape dims: layer norm's shader, not centred, no bias.")
_op("group_norm", group_norm, _group_norm_build, ("float_layer_norm",),
    "Float group norm: C/groups channels x positions a row, per-channel weight and bias.")
_op("softmax", softmax, _softmax_build(()), ("float_softmax",), "Float softmax along dim (max-subtracted).")
_op("softmax_masked", softmax_masked, _softmax_masked_build, ("float_softmax",),
    "Float softmax(x * scale + mask) along the last dim (attention weights), mask broadcast.")
_op("log_softmax", log_softmax, _softmax_build(("LOG",)), ("float_softmax",), "Float log-softmax along dim.")
