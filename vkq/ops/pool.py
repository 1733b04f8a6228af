"""Pooling of int8 tensors: max_pool2d_q8, avg_pool2d_q8, adaptive_avg_pool2d_q8,
adaptive_max_pool2d_q8 (4W4C, (N, C, H, W) as convolutions produce it); the float pools beside
them. Max unpooling (max_unpool2d_q8, max_unpool2d) is in vkq/ops/unpool.py, cat_q8 in
vkq/ops/cat_q8.py (split off so that this module stays under 800 lines).

Window geometry follows PyTorch exactly (pooling_output_shape, ceil_mode, the avg pool divisor,
the adaptive start/end formula); the numpy references below are the specification, and
`*_params` helpers turn float qparams and pool arguments into the integer attrs:

  max_pool2d_q8           attrs kernel, stride, padding, dilation [2], ceil_mode
                          out = max over the window (qparams unchanged: max commutes with quantization)
  avg_pool2d_q8           attrs kernel, stride, padding [2], ceil_mode, count_include_pad,
                          divisor_override, in_zp, out_zp, qmin, qmax, divisors, multipliers, shifts
  adaptive_max_pool2d_q8  attrs output_size [2]
                          out = max over the window (PyTorch's adaptive windows; qparams unchanged)
  adaptive_avg_pool2d_q8  attrs output_size [2], in_zp, out_zp, qmin, qmax, in_scale, out_scale
                          (the windows' divisors follow from the input size, so their multipliers
                          are made when the op runs: one program pools every input size)
                          acc = sum over the window of (q - in_zp)
                          out = requantize(acc, m[d], s[d], out_zp, qmin, qmax) for the position's
                          divisor d, (m[d], s[d]) = quantize_multiplier(s_in / (s_out * d))
"""
from __future__ import annotations

import numpy as np

from .. import packing
from ..device import grid_1d
from ..quant import INT8_MAX, INT8_MIN, activation_bounds, quantize_multiplier, requant_clamp_params, requantize
from ..registry import register_op
from ..vkinfo import DeviceLimit
from .eltwise import _check_zp, _requant_consts

LOCAL = 64
WINDOW_TILE = (2, 1)     # pool_window: output rows x output blocks (4 widths) per invocation
WINDOW_TILE_MIN = 1024   # ... when the output has at least this many such tiles
GLOBAL_CPU_SPLIT = 256   # pool_global on CPU drivers: 4 channel blocks a workgroup from this many spatial blocks
GLOBAL_FLUSH = 64        # pool_global.comp's FLUSH: spatial blocks an outer-loop pass sums
# pool_window and conv2d_float's pools unroll a window's taps: past this many the pipeline takes
# seconds to minutes to compile (llvmpipe, first call: 28 x 28 2.8 s, 56 x 56 24 s, 112 x 112
# 576 s), so a larger window runs on the CPU, and one window over the whole input loops instead
MAX_UNROLLED_TAPS = 1024


def _pair(v) -> tuple[int, int]:
    v = [int(x) for x in (v if isinstance(v, (list, tuple)) else (v, v))]
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def pool_output_size(size, kernel, stride, padding=0, dilation=1, ceil_mode=False) -> int:
    """PyTorch's pooling_output_shape: a ceil_mode window must start inside the input or its
    left padding."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    if out < 1:
        raise ValueError(f"pool of kernel {kernel} (dilation {dilation}, padding {padding}) "
                         f"does not fit an input of {size}")
    return out


def pool2d_output_shape(shape, kernel, stride=None, padding=0, dilation=1, ceil_mode=False,
                        output_size=None) -> tuple:
    """The output shape of a pool on an input of `shape` (..., H, W); output_size for adaptive."""
    *lead, h, w = shape
    if output_size is not None:
        return (*lead, *_pair(output_size))
    k, st, pd, dl = _pair(kernel), _pair(stride or kernel), _pair(padding), _pair(dilation)
    return (*lead, pool_output_size(h, k[0], st[0], pd[0], dl[0], ceil_mode),
            pool_output_size(w, k[1], st[1], pd[1], dl[1], ceil_mode))


def _geometry(kernel, stride, padding, dilation=1) -> dict:
    k, st, pd, dl = _pair(kernel), _pair(stride or kernel), _pair(padding), _pair(dilation)
    for i in range(2):
        if min(k[i], st[i], dl[i]) < 1 or pd[i] < 0:
            raise ValueError(f"pool kernel, stride, dilation must be >= 1 and padding >= 0: {k, st, pd, dl}")
        if pd[i] > k[i] // 2:   # as PyTorch checks it
            raise ValueError(f"pool padding {pd} must be at most half the kernel {k}")
    return {"kernel": list(k), "stride": list(st), "padding": list(pd), "dilation": list(dl)}


def _divisor_table(in_scale, out_scale, divisors) -> dict:
    """(multiplier, shift) for each divisor d: M = s_in / (s_out * d)."""
    divisors = sorted({int(d) for d in divisors})
    pairs = [quantize_multiplier(float(in_scale) / (float(out_scale) * d)) for d in divisors]
    return {"divisors": divisors, "multipliers": [m for m, _ in pairs], "shifts": [s for _, s in pairs]}


def _out_attrs(in_zp, out_scale, out_zp, activation):
    _check_zp(in_zp, out_zp)
    qmin, qmax = activation_bounds(activation, out_scale, out_zp)
    return {"in_zp": int(in_zp), "out_zp": int(out_zp), "qmin": qmin, "qmax": qmax}


def max_pool2d_params(kernel, stride=None, padding=0, dilation=1, ceil_mode=False) -> dict:
    """Attrs of max_pool2d_q8 (stride defaults to the kernel, as in PyTorch)."""
    return {**_geometry(kernel, stride, padding, dilation), "ceil_mode": int(bool(ceil_mode))}


def avg_pool2d_geometry(kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                        divisor_override=None) -> dict:
    """Attrs of avg_pool2d (float): the windows and PyTorch's divisor rules."""
    g = _geometry(kernel, stride, padding)
    del g["dilation"]
    return {**g, "ceil_mode": int(bool(ceil_mode)), "count_include_pad": int(bool(count_include_pad)),
            "divisor_override": int(divisor_override or 0)}


def avg_pool2d_params(in_scale, in_zp, out_scale, out_zp, kernel, stride=None, padding=0,
                      ceil_mode=False, count_include_pad=True, divisor_override=None,
                      activation=None) -> dict:
    """Attrs of avg_pool2d_q8: the geometry and a multiplier for every divisor a window can
    have (1 .. kh*kw, or the override)."""
    g = avg_pool2d_geometry(kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    kh, kw = g["kernel"]
    divisors = [int(divisor_override)] if divisor_override else range(1, kh * kw + 1)
    return {**g, **_out_attrs(in_zp, out_scale, out_zp, activation),
            **_divisor_table(in_scale, out_scale, divisors)}


def adaptive_avg_pool2d_params(in_scale, in_zp, out_scale, out_zp, output_size, activation=None) -> dict:
    """Attrs of adaptive_avg_pool2d_q8: its windows depend on the input size, so the attrs keep
    the two scales, and each divisor's multiplier is made from them for the input at hand
    (_position_multipliers): the same for any input size, as dynamic shapes need."""
    oh, ow = _pair(output_size)
    return {"output_size": [oh, ow], **_out_attrs(in_zp, out_scale, out_zp, activation),
            "in_scale": float(in_scale), "out_scale": float(out_scale)}


# -- windows: (start, end, divisor factor) per output index along one dim ---------------------

def _avg_windows(n, out, k, s, p, count_include_pad):
    """PyTorch's avg_pool2d: the divisor counts padding (not the ceil_mode overhang) unless
    count_include_pad is off; then only the in-bounds taps."""
    x0 = np.arange(out) * s - p
    x1 = np.minimum(x0 + k, n + p)
    start, end = np.maximum(x0, 0), np.minimum(x1, n)
    end = np.maximum(end, start)
    return start, end, (x1 - x0) if count_include_pad else end - start


def _adaptive_windows(n, out):
    o = np.arange(out)
    start, end = o * n // out, ((o + 1) * n + out - 1) // out
    return start, end, end - start


def _windows(attrs, h, w):
    """(hs, he, ws, we, divisor[OH, OW]) of an avg/adaptive pool over an h x w input."""
    if "output_size" in attrs:
        (hs, he, fh), (ws, we, fw) = (_adaptive_windows(h, attrs["output_size"][0]),
                                      _adaptive_windows(w, attrs["output_size"][1]))
    else:
        k, st, pd = attrs["kernel"], attrs["stride"], attrs["padding"]
        ci = attrs.get("count_include_pad", 1)
        oh, ow = (pool_output_size(x, k[i], st[i], pd[i], 1, attrs.get("ceil_mode", 0))
                  for i, x in enumerate((h, w)))
        hs, he, fh = _avg_windows(h, oh, k[0], st[0], pd[0], ci)
        ws, we, fw = _avg_windows(w, ow, k[1], st[1], pd[1], ci)
    div = np.outer(fh, fw)
    if attrs.get("divisor_override"):
        div = np.full_like(div, attrs["divisor_override"])
    div[(he <= hs)[:, None] | (we <= ws)[None, :]] = 0     # an empty window
    return hs, he, ws, we, div


def _position_multipliers(attrs, div):
    """(m, s) int32 arrays per output position: the divisor table looked up (made here from the
    scales when the attrs have none: adaptive pooling); an empty window (divisor 0, PyTorch
    gives 0.0) gets m = 0, i.e. the zero point."""
    if "divisors" not in attrs:
        attrs = {**attrs, **_divisor_table(attrs["in_scale"], attrs["out_scale"], np.unique(div[div > 0]))}
    table = dict(zip(attrs["divisors"], zip(attrs["multipliers"], attrs["shifts"])))
    table[0] = (0, 31)
    missing = sorted(set(np.unique(div).tolist()) - set(table))
    if missing:
        raise ValueError(f"avg pool divisors {missing} have no multiplier in the attrs (made for another input size?)")
    ms = np.array([table[d] for d in div.reshape(-1).tolist()], dtype=np.int32)
    return ms[:, 0].reshape(div.shape), ms[:, 1].reshape(div.shape)


def _avg_reference(q, attrs):
    x = np.asarray(q).astype(np.int64)
    n, c, h, w = packing.as_nchw(x.shape)
    x = x.reshape(n, c, h, w)
    hs, he, ws, we, div = _windows(attrs, h, w)
    integral = np.zeros((n, c, h + 1, w + 1), np.int64)
    integral[:, :, 1:, 1:] = x.cumsum(2).cumsum(3)
    box = lambda r, s: integral[:, :, r][:, :, :, s]
    total = box(he, we) - box(hs, we) - box(he, ws) + box(hs, ws)
    acc = total - np.outer(he - hs, we - ws) * attrs["in_zp"]
    m, s = _position_multipliers(attrs, div)
    out = requantize(acc, m, s, attrs["out_zp"], attrs.get("qmin", INT8_MIN), attrs.get("qmax", INT8_MAX))
    return out.reshape(q.shape[:-2] + out.shape[-2:])


def _spatial_specs(ctx, node):
    si, so = ctx.spec(node.inputs[0]), ctx.spec(node.outputs[0])
    if si.layout != "4W4C" or so.layout != "4W4C":
        raise ValueError(f"{node.name}: pooling runs on 4W4C tensors, got {si.layout} -> {so.layout}")
    return si, so, packing.as_nchw(si.shape), packing.as_nchw(so.shape)


def _check_out_shape(node, got, want):
    if tuple(got) != tuple(want):
        raise ValueError(f"{node.name}: output shape {tuple(got)}, the pool gives {tuple(want)}")


def _blocks(outs) -> int:
    """Output ivec4 blocks of a 4W4C (N, C, OH, OW) tensor: one invocation each."""
    n, c, oh, ow = outs
    return n * oh * -(-ow // 4) * -(-c // 4)


def _window_tile(outs) -> tuple[int, int]:
    """(output rows, output blocks along the width) per pool_window invocation: WINDOW_TILE
    where the output has enough tiles to spread over the device, 1 x 1 for small outputs."""
    n, c, oh, ow = outs
    th, tw = WINDOW_TILE
    tiles = n * -(-c // 4) * -(-oh // th) * -(-(-(-ow // 4)) // tw)
    return (th, tw) if tiles >= WINDOW_TILE_MIN else (1, 1)


def _unrolled_taps(node) -> None:
    """DeviceLimit for a window of more than MAX_UNROLLED_TAPS taps (its kernel unrolls them)."""
    kh, kw = _pair(node.attrs["kernel"])
    if kh * kw > MAX_UNROLLED_TAPS:
        raise DeviceLimit(f"a {kh} x {kw} pool window: its kernel unrolls {kh * kw} taps (more than "
                          f"{MAX_UNROLLED_TAPS}: minutes of shader compilation)")


def _whole_input(a, h, w) -> bool:
    """Whether the pool's one window is exactly the input (F.max_pool2d(x, x.shape[2:]), CBAM)."""
    return (tuple(_pair(a["kernel"])) == (h, w) and tuple(_pair(a["padding"])) == (0, 0)
            and tuple(_pair(a.get("dilation", 1))) == (1, 1))


def _window_dispatch(ctx, node, variant, ins, outs, buffers, push=((0, 0, 0, 0), 0, 0, INT8_MIN, INT8_MAX, 0)):
    """pool_window with the geometry as specialization constants (kernel, stride, padding,
    dilation; each (h, w)), then the tile."""
    a = node.attrs
    _unrolled_taps(node)
    th, tw = _window_tile(outs)
    geo = [*a["kernel"], *a["stride"], *a["padding"], *a.get("dilation", (1, 1)), th, tw, *ins, *outs[2:]]
    n, c, oh, ow = outs
    tiles = n * -(-c // 4) * -(-oh // th) * -(-(-(-ow // 4)) // tw)
    return ctx.device.dispatch("pool_window", buffers, grid_1d(tiles, LOCAL), local=(LOCAL,),
                               spec=geo, defines=variant.split(), push=push)


def max_windows(x, fill, kernel, stride, padding, dilation, ceil_mode):
    """The max over each pool window of x (..., H, W) with PyTorch's geometry; taps outside the
    input are `fill` (below every value)."""
    lead, (h, w) = x.shape[:-2], x.shape[-2:]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh = pool_output_size(h, kh, sh, ph, dh, ceil_mode)
    ow = pool_output_size(w, kw, sw, pw, dw, ceil_mode)
    rows, cols = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    xp = np.full(lead + (max(rows, ph + h), max(cols, pw + w)), fill, x.dtype)
    xp[..., ph:ph + h, pw:pw + w] = x
    out = np.full(lead + (oh, ow), fill, x.dtype)
    for i in range(kh):
        for j in range(kw):
            tap = xp[..., i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            np.maximum(out, tap, out=out)
    return out


@register_op
class MaxPool2dQ8:
    """Max pool on int8 with PyTorch's geometry (padding taps are -inf: skipped; a window with
    no input tap gives -128, as quantize(-inf) does). Same qparams in and out."""
    name = "max_pool2d_q8"
    shaders = ("pool_window",)

    def reference(q, *, kernel, stride, padding, dilation=(1, 1), ceil_mode=0):
        out = max_windows(np.asarray(q).astype(np.int16), -129, kernel, stride, padding, dilation, ceil_mode)
        return np.maximum(out, INT8_MIN).astype(np.int8)

    def build(ctx, node):
        _, _, ins, outs = _spatial_specs(ctx, node)
        a = node.attrs
        _check_out_shape(node, outs, pool2d_output_shape(ins, a["kernel"], a["stride"], a["padding"],
                                                         a.get("dilation", 1), a.get("ceil_mode", 0)))
        if _whole_input(a, *ins[2:]):      # a global max: pool_adaptive's loops, no unrolled taps
            return [_adaptive_max_dispatch(ctx, node, "MAX", ins[:2], ins[2:], (1, 1), _blocks(outs))]
        return [_window_dispatch(ctx, node, "MAX", ins, outs,
                                 [ctx.buffer(node.inputs[0]), ctx.buffer(node.outputs[0])])]


def float_pool_dispatch(ctx, node, variant, kernel, stride, padding, dilation, extra=()):
    """conv2d_float's MAX / AVG variant over (N, C, H, W) or (C, H, W): a window per channel."""
    from .conv import cdiv
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (_pair(v) for v in (kernel, stride, padding, dilation))
    _unrolled_taps(node)
    n, c, h, w = packing.as_nchw(ctx.spec(node.inputs[0]).shape)
    oh, ow = ctx.spec(node.outputs[0]).shape[-2:]
    tw = min(4, ow)
    return ctx.device.dispatch(
        "conv2d_float", [ctx.buffer(node.inputs[0]), ctx.buffer(node.outputs[0]), *extra],
        grid_1d(n * c * oh * cdiv(ow, tw), 64), local=(64,), spec=(1, tw, kh, kw, sh, sw, dh, dw),
        push=(np.array([n, c, h, w]), np.array([n, c, oh, ow]), np.array([ph, pw, c, 1])), defines=[variant])


def _float_pool_decline(node, tensors):
    x = tensors[node.inputs[0]]
    if x.dtype != "float32" or len(x.shape) not in (3, 4):
        return f"{node.op}: {x.dtype} {x.shape} (the kernel takes float32 (N, C, H, W) or (C, H, W))"
    return None


@register_op
class AvgPool2d:
    """Average pool on float32 (..., H, W) with PyTorch's geometry and divisors (attrs kernel,
    stride, padding, ceil_mode, count_include_pad, divisor_override): conv2d_float's AVG
    variant; the taps summed in ATen's order, so within Vulkan's division (2.5 ulp) of it."""
    name = "avg_pool2d"
    shaders = ("conv2d_float",)
    decline = staticmethod(_float_pool_decline)

    def reference(x, **attrs):
        x = np.asarray(x, np.float32)
        lead, (h, w) = x.shape[:-2], x.shape[-2:]
        (kh, kw), (sh, sw), (ph, pw) = attrs["kernel"], attrs["stride"], attrs["padding"]
        hs, he, ws, we, div = _windows(attrs, h, w)
        total = np.zeros(lead + div.shape, np.float32)
        xp = np.zeros(lead + (h + 2 * ph + kh, w + 2 * pw + kw), np.float32)
        xp[..., ph:ph + h, pw:pw + w] = x
        oh, ow = div.shape
        for i in range(kh):                       # row-major over the window, as ATen sums
            for j in range(kw):
                total += xp[..., i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(div > 0, total / np.maximum(div, 1).astype(np.float32), np.float32(0))

    def build(ctx, node):
        a = node.attrs
        x_shape = ctx.spec(node.inputs[0]).shape
        _check_out_shape(node, ctx.spec(node.outputs[0]).shape,
                         pool2d_output_shape(x_shape, a["kernel"], a["stride"], a["padding"], 1, a.get("ceil_mode", 0)))
        div = _windows(a, *x_shape[-2:])[4].astype(np.float32)
        return [float_pool_dispatch(ctx, node, "AVG", a["kernel"], a["stride"], a["padding"], 1,
                                    [ctx.const_buffer(div.reshape(-1))])]


@register_op
class MaxPool2d:
    """Max pool on float32 (..., H, W) with PyTorch's geometry (attrs as max_pool2d_q8's),
    exact: the MAX variant of shaders/conv2d_float.comp, a window per channel."""
    name = "max_pool2d"
    shaders = ("conv2d_float",)

    def reference(x, *, kernel, stride, padding, dilation=(1, 1), ceil_mode=0):
        return max_windows(np.asarray(x, np.float32), -np.inf, kernel, stride, padding, dilation, ceil_mode)

    decline = staticmethod(_float_pool_decline)

    def build(ctx, node):
        a = node.attrs
        x_shape, y_shape = ctx.spec(node.inputs[0]).shape, ctx.spec(node.outputs[0]).shape
        _check_out_shape(node, y_shape, pool2d_output_shape(x_shape, a["kernel"], a["stride"], a["padding"],
                                                            a.get("dilation", 1), a.get("ceil_mode", 0)))
        if _whole_input(a, *x_shape[-2:]):     # a global max: pool_adaptive's loops, no unrolled taps
            planes = int(np.prod(x_shape[:-2]))
            return [_adaptive_max_dispatch(ctx, node, "FLOAT_MAX", (planes, 1), x_shape[-2:], (1, 1), planes)]
        return [float_pool_dispatch(ctx, node, "MAX", a["kernel"], a["stride"], a["padding"], a.get("dilation", 1))]


def adaptive_matrix(h, w, oh, ow) -> np.ndarray:
    """(H*W, OH*OW) float32: column (i, j) averages adaptive window (i, j) (PyTorch's windows:
    floor(i H / OH) .. ceil((i + 1) H / OH)), so that x (.., H*W) @ it is the pool."""
    hs, he, _ = _adaptive_windows(h, oh)
    ws, we, _ = _adaptive_windows(w, ow)
    m = np.zeros((h, w, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            m[hs[i]:he[i], ws[j]:we[j], i, j] = 1.0 / ((he[i] - hs[i]) * (we[j] - ws[j]))
    return m.reshape(h * w, oh * ow).astype(np.float32)


@register_op
class AdaptiveAvgPool2d:
    """Adaptive average pool on float32 (..., H, W) to output_size [OH, OW], windows as PyTorch's
    (uneven where OH does not divide H: PSPNet's and UperNet's pyramid pools): one float matmul
    of x as (.., H*W) rows by a constant (H*W, OH*OW) averaging matrix (adaptive_matrix), so
    within float rounding of the mean (the sums in another order). 1x1 lowers to `mean` instead."""
    name = "adaptive_avg_pool2d"
    shaders = ("float_matmul",)
    decline = staticmethod(_float_pool_decline)

    def reference(x, *, output_size):
        x = np.asarray(x, np.float64)
        (h, w), (oh, ow) = x.shape[-2:], output_size
        hs, he, _ = _adaptive_windows(h, oh)
        ws, we, _ = _adaptive_windows(w, ow)
        out = np.empty(x.shape[:-2] + (oh, ow))
        for i in range(oh):
            for j in range(ow):
                out[..., i, j] = x[..., hs[i]:he[i], ws[j]:we[j]].mean(axis=(-2, -1))
        return out.astype(np.float32)

    def build(ctx, node):
        from .float_matmul import _matmul_dispatch
        x_shape, y_shape = ctx.spec(node.inputs[0]).shape, ctx.spec(node.outputs[0]).shape
        (h, w), (oh, ow) = x_shape[-2:], node.attrs["output_size"]
        _check_out_shape(node, y_shape, tuple(x_shape[:-2]) + (oh, ow))
        rows, k, n = int(np.prod(x_shape[:-2])), h * w, oh * ow
        pool = ctx.const_buffer(adaptive_matrix(h, w, oh, ow))
        return [_matmul_dispatch(ctx, node, [[rows, k], [k, 1]], [[k, n], [n, 1]], [n, 1], rows * n,
                                 buffers=[ctx.buffer(node.inputs[0]), pool, ctx.buffer(node.outputs[0])])]


def _avg_build(ctx, node):
    """A global pool when the one window is the whole input, else pool_window (regular
    windows) or pool_adaptive with a table of requantization constants per output position."""
    _, _, ins, outs = _spatial_specs(ctx, node)
    a = node.attrs
    hs, he, ws, we, div = _windows(a, ins[2], ins[3])
    _check_out_shape(node, outs, ins[:2] + div.shape)
    m, s = _position_multipliers(a, div)
    zps = (a["in_zp"], a["out_zp"], a.get("qmin", INT8_MIN), a.get("qmax", INT8_MAX))
    src, dst = ctx.buffer(node.inputs[0]), ctx.buffer(node.outputs[0])
    if div.shape == (1, 1) and (hs[0], he[0], ws[0], we[0]) == (0, ins[2], 0, ins[3]):
        return [_global_dispatch(ctx, ins, src, dst, int(m[0, 0]), int(s[0, 0]), zps)]
    # per output position: requantize_clamped's (bound, lshift, m, rshift) (requant.glsl)
    rq = np.stack(requant_clamp_params(m.reshape(-1), s.reshape(-1)), -1)
    if "output_size" in a:
        _adaptive_loop_budget(ctx, ins[2:], outs[2:], 4, "adaptive average pool")
        return [ctx.device.dispatch("pool_adaptive", [src, dst, ctx.const_buffer(rq.reshape(-1), np.int32)],
                                    grid_1d(_blocks(outs), LOCAL), local=(LOCAL,), spec=(*ins, *outs[2:]), push=zps)]
    fill = (a["in_zp"] & 0xFF) * 0x01010101   # in_zp in every byte: taps outside the input add 0
    push = (rq[0], *zps, np.array(fill, np.uint32).view(np.int32))
    if (rq == rq[0]).all():   # one divisor everywhere: constants in push constants, no table
        return [_window_dispatch(ctx, node, "AVG UNIFORM", ins, outs, [src, dst], push)]
    return [_window_dispatch(ctx, node, "AVG", ins, outs, [src, dst, ctx.const_buffer(rq.reshape(-1), np.int32)], push)]


def _global_local(info, n, c4, spatial) -> tuple[int, int]:
    """pool_global's workgroup (x over channel blocks, y splitting each spatial sum). CPU drivers
    run a workgroup as SIMD lanes of one thread, where a barrier costs more than the split saves
    (lavapipe, SwiftShader: y = 1 is fastest); on large maps there x is 4 channel blocks, so that
    the channel blocks spread over many workgroups, i.e. threads (lavapipe, 1x256x128x128, wall
    clock: 2.6 ms with x = 64, one workgroup; 1.2 ms at 4, 1.0 at 2, but 2.2 at 8 and 16;
    SwiftShader the same at 4, 8 and 64). On GPUs y grows until the grid fills the device."""
    lx = min(64, 1 << (c4 - 1).bit_length())
    if info.type == "cpu":
        return _within_loop_budget(info, min(lx, 4) if spatial >= GLOBAL_CPU_SPLIT else lx, spatial)
    ly, limit = 1, min(256, info.max_workgroup_invocations)
    while lx * ly * 2 <= limit and ly * 2 <= spatial and n * c4 * ly < 16384:
        ly *= 2
    return lx, ly


def _within_loop_budget(info, lx, spatial) -> tuple[int, int]:
    """(lx, ly) with the spatial sum split over the fewest rows ly whose invocations stay within
    the device's loop budget (llvmpipe stops an invocation's loops after 65535 iterations and
    leaves the rest undone: a 550 x 550 map summed a fraction of its blocks). Row y's loop
    iterations: its share of the blocks, one outer pass per GLOBAL_FLUSH of them, and row 0's
    pass over the rows' partial sums."""
    budget, limit = info.loop_budget, min(256, info.max_workgroup_invocations)
    ly = 1
    while budget is not None and (-(-spatial // ly) + -(-spatial // (ly * GLOBAL_FLUSH)) + ly + 4) > budget:
        if lx * ly * 2 > limit:
            raise DeviceLimit(f"a global pool over {spatial} blocks of 16 bytes a channel block is past "
                              f"{info.name}'s loop budget ({budget} iterations an invocation) even split "
                              f"{ly} ways")
        ly *= 2
    return lx, ly


def _global_dispatch(ctx, ins, src, dst, m, s, zps):
    n, c, h, w = ins
    c4, spatial = -(-c // 4), h * -(-w // 4)
    lx, ly = _global_local(ctx.device.info, n, c4, spatial)
    in_zp, out_zp, qmin, qmax = zps
    return ctx.device.dispatch(
        "pool_global", [src, dst], (-(-c4 // lx), n, 1), local=(lx, ly), spec=(c, spatial),
        push=(h * w, in_zp, _requant_consts(m, s), out_zp, qmin, qmax))


@register_op
class AvgPool2dQ8:
    """Average pool on int8: sum of (q - in_zp) over the in-bounds taps (padding taps hold the
    value 0.0, i.e. q = in_zp, and add 0), then requantize with s_in / (s_out * divisor), the
    divisor as PyTorch's avg_pool2d takes it (attrs from avg_pool2d_params)."""
    name = "avg_pool2d_q8"
    shaders = ("pool_window", "pool_global")

    def reference(q, **attrs):
        return _avg_reference(q, attrs)

    def build(ctx, node):
        return _avg_build(ctx, node)


@register_op
class AdaptiveAvgPool2dQ8:
    """Adaptive average pool on int8: window o along a dim of n inputs is
    [floor(o*n/out), ceil((o+1)*n/out)); sum of (q - in_zp), requantize with s_in / (s_out *
    window area). Output 1x1 (global pooling, the common case) runs as pool_global: one sum per
    (n, channel block) over 16-byte blocks, split across a workgroup's y on GPUs."""
    name = "adaptive_avg_pool2d_q8"
    shaders = ("pool_adaptive", "pool_global")

    def reference(q, **attrs):
        return _avg_reference(q, attrs)

    def build(ctx, node):
        return _avg_build(ctx, node)


def adaptive_max(x, output_size):
    """The max over each adaptive window of x (..., H, W) (PyTorch's windows, never empty;
    NaN where a float window holds one)."""
    (h, w), (oh, ow) = x.shape[-2:], output_size
    hs, he, _ = _adaptive_windows(h, oh)
    ws, we, _ = _adaptive_windows(w, ow)
    out = np.empty(x.shape[:-2] + (oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            out[..., i, j] = x[..., hs[i]:he[i], ws[j]:we[j]].max(axis=(-2, -1))
    return out


def _adaptive_loop_budget(ctx, ins, outs, columns: int, what: str) -> None:
    """DeviceLimit where pool_adaptive's loops over a window's rows and columns (`columns`
    output columns an invocation: 4 for a 4W4C block, 1 a float value) pass the loop budget:
    llvmpipe left a 256 x 256 global max pool's last taps out without an error."""
    if ctx.device.info.loop_budget is None:
        return
    rows = int(_adaptive_windows(ins[0], outs[0])[2].max())
    cols = _adaptive_windows(ins[1], outs[1])[2] + 2               # + each column loop's exit and entry
    widest = max(int(cols[i:i + columns].sum()) for i in range(0, len(cols), columns))
    ctx.device.info.check_loop_budget(rows * widest + 16, f"{what} over {ins[0]} x {ins[1]} to {outs[0]} x {outs[1]}")


def _adaptive_max_dispatch(ctx, node, variant, planes, ins, outs, total):
    _adaptive_loop_budget(ctx, ins, outs, 4 if variant == "MAX" else 1, "adaptive max pool")
    return ctx.device.dispatch("pool_adaptive", [ctx.buffer(node.inputs[0]), ctx.buffer(node.outputs[0])],
                               grid_1d(total, LOCAL), local=(LOCAL,), spec=(*planes, *ins, *outs), defines=[variant])


@register_op
class AdaptiveMaxPool2dQ8:
    """Adaptive max pool on int8 (attrs output_size [OH, OW]): window o along a dim of n inputs
    is [floor(o*n/out), ceil((o+1)*n/out)); out = its largest value (the qparams unchanged).
    The windows follow from the input size when the op runs (one program for every size).
    pool_adaptive's MAX variant: one invocation per output 4W4C block."""
    name = "adaptive_max_pool2d_q8"
    shaders = ("pool_adaptive",)

    def reference(q, *, output_size):
        return adaptive_max(np.asarray(q).astype(np.int8), output_size)

    def build(ctx, node):
        _, _, ins, outs = _spatial_specs(ctx, node)
        _check_out_shape(node, outs, ins[:2] + tuple(node.attrs["output_size"]))
        return [_adaptive_max_dispatch(ctx, node, "MAX", ins[:2], ins[2:], outs[2:], _blocks(outs))]


@register_op
class AdaptiveMaxPool2d:
    """Adaptive max pool on float32 (..., H, W) to output_size [OH, OW], windows as PyTorch's:
    pool_adaptive's FLOAT_MAX variant, one invocation per output value; exact (NaN if the
    window holds one, as ATen)."""
    name = "adaptive_max_pool2d"
    shaders = ("pool_adaptive",)

    def reference(x, *, output_size):
        return adaptive_max(np.asarray(x, np.float32), output_size)

    def decline(node, tensors):
        x = tensors[node.inputs[0]]
        if x.dtype != "float32" or len(x.shape) < 2:
            return f"{node.op}: {x.dtype} {x.shape} (the kernel takes float32 (..., H, W))"
        return None

    def build(ctx, node):
        x_shape = ctx.spec(node.inputs[0]).shape
        size = tuple(node.attrs["output_size"])
        _check_out_shape(node, ctx.spec(node.outputs[0]).shape, tuple(x_shape[:-2]) + size)
        planes = int(np.prod(x_shape[:-2]))
        return [_adaptive_max_dispatch(ctx, node, "FLOAT_MAX", (planes, 1), x_shape[-2:], size,
                                       planes * size[0] * size[1])]
