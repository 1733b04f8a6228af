"""Resizing (N, C, H, W) tensors on Vulkan, float32 and int8.

  upsample_bilinear2d(x; align_corners, scales)   shaders/upsample_bilinear.comp
      float32: PyTorch's formula in float32, taps (source rows/columns and weights) computed
      on the host exactly as ATen computes them (area_pixel_compute_scale/_source_index in
      float32); the device rounds each op once in ATen's order, so it agrees to float rounding.
      int8 (one quantization in and out): the same taps with weights in Q11 (2048ths), integer
      arithmetic, round half to even: within one step of PT2E's dequantize -> float bilinear ->
      quantize (each weight is off by at most 2^-12).
  upsample_bicubic2d(x; align_corners, scales, out_size)   shaders/resample.comp
      float32 only (PT2E leaves it float: no int8 form): ATen's taps (four source rows/columns,
      clamped at the borders, and their cubic-convolution weights, A = -0.75) computed on the
      host in float32 as ATen computes them; the device sums in ATen's order (the rows' sums over
      the columns first), each op rounded once: it agrees to float rounding.
  grid_sample(x, grid; mode, padding_mode, align_corners)   shaders/grid_sample.comp
      float32 x (N, C, H, W) read at grid (N, Ho, Wo, 2)'s normalized (x, y): torch's
      grid_sample, bilinear or nearest, padding zeros / border / reflection (ATen's
      grid_sampler_compute_source_index and corner weights); it agrees to float rounding.
  upsample_nearest2d(x; scales, exact, out_size)     shaders/repack.comp, float_copy.comp (INDEX)
      a pure gather, any dtype: the source row/column of each output one as ATen computes it
      (nearest_idx / nearest_exact_idx, float32), the index map made when the op is built for
      the shape at hand: one program for every input size (dynamic shapes; a `take` holds a
      constant map for one size). The other movers (1-D/3-D nearest, reflect padding, ...) are
      `take`s with the index map ATen computes on the indices themselves.
scales: [scale_h, scale_w] as given to interpolate (None: from the sizes); the output size is
the output tensor's.
"""
from __future__ import annotations

import numpy as np

from .. import packing
from ..device import grid_1d
from ..registry import register_op

F32 = np.float32
Q = 11                    # weight bits of the int8 kernel
LOCAL = 64


def area_scale(in_size: int, out_size: int, align_corners: bool, scale=None):
    """ATen's area_pixel_compute_scale in float32: input steps per output step."""
    if align_corners:
        return F32(in_size - 1) / F32(out_size - 1) if out_size > 1 else F32(0)
    return F32(1.0 / scale) if scale is not None and scale > 0 else F32(in_size) / F32(out_size)


def linear_taps(in_size: int, out_size: int, align_corners: bool, scale=None):
    """(i0, i1, w0, w1) per output index, float32 weights, as ATen's upsample_bilinear2d."""
    s = area_scale(in_size, out_size, align_corners, scale)
    dst = np.arange(out_size, dtype=F32)
    if align_corners:
        src = s * dst
    else:
        src = np.maximum(s * (dst + F32(0.5)) - F32(0.5), F32(0))
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < in_size - 1)
    w1 = (src - i0.astype(F32)).astype(F32)
    w0 = (F32(1) - w1).astype(F32)
    return i0, i1, w0, w1


def _taps(shape, out_shape, align_corners, scales):
    scales = scales or [None, None]
    return (linear_taps(shape[2], out_shape[2], align_corners, scales[0]),
            linear_taps(shape[3], out_shape[3], align_corners, scales[1]))


def _q(w1):
    w1q = np.rint(w1.astype(np.float64) * (1 << Q)).astype(np.int64)
    return (1 << Q) - w1q, w1q


def upsample_bilinear2d(x, *, out_size=None, align_corners=False, scales=None):
    """out_size None: from the scales, as ATen sizes the output (int(size * scale))."""
    x = np.asarray(x)
    n, c = x.shape[:2]
    if out_size is None:
        out_size = [int(x.shape[2 + i] * float(scales[i])) for i in range(2)]
    (y0, y1, wy0, wy1), (x0, x1, wx0, wx1) = _taps(x.shape, [n, c, *out_size], align_corners, scales)
    if x.dtype == np.int8:
        (qy0, qy1), (qx0, qx1) = _q(wy1), _q(wx1)
        v = x.astype(np.int64)
        top = qx0 * v[:, :, y0][..., x0] + qx1 * v[:, :, y0][..., x1]
        bot = qx0 * v[:, :, y1][..., x0] + qx1 * v[:, :, y1][..., x1]
        acc = qy0[:, None] * top + qy1[:, None] * bot
        q, r, half = acc >> (2 * Q), acc & ((1 << 2 * Q) - 1), 1 << (2 * Q - 1)
        return (q + ((r > half) | ((r == half) & (q & 1 == 1)))).astype(np.int8)
    x = x.astype(F32)
    top = x[:, :, y0][..., x0] * wx0 + x[:, :, y0][..., x1] * wx1
    bot = x[:, :, y1][..., x0] * wx0 + x[:, :, y1][..., x1] * wx1
    return (top * wy0[:, None] + bot * wy1[:, None]).astype(F32)


def bilinear_attrs(fx_node, out_shape) -> dict:
    """The attrs of an FX aten.upsample_bilinear2d (.vec: output_size, align_corners,
    scale_factors; .default: output_size, align_corners, scales_h, scales_w); with both scales
    no output size (it follows from the input's: one program for every input size)."""
    a = list(fx_node.args) + [None] * 5
    if str(fx_node.target).endswith(".vec"):
        scales = a[3]
    else:
        scales = None if a[3] is None and a[4] is None else [a[3], a[4]]
    scales = None if scales is None else [None if v is None else float(v) for v in scales]
    whole = scales is not None and None not in scales      # the output size follows from the input's
    return {"out_size": None if whole else [int(d) for d in out_shape[2:]], "align_corners": bool(a[2]),
            "scales": scales}


CUBIC_A = F32(-0.75)


def cubic_taps(in_size: int, out_size: int, align_corners: bool, scale=None):
    """(index (4, out), weight (4, out)) per output index, as ATen's upsample_bicubic2d
    (HelperInterpCubic: area_pixel_compute_source_index with cubic=True, guard_index_and_lambda,
    get_cubic_upsample_coefficients; all in float32; indices clamped to the input)."""
    s = area_scale(in_size, out_size, align_corners, scale)
    dst = np.arange(out_size, dtype=F32)
    src = (s * dst if align_corners else s * (dst + F32(0.5)) - F32(0.5)).astype(F32)
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    t = np.clip(src - i0.astype(F32), F32(0), F32(1)).astype(F32)
    a = CUBIC_A

    def near(x):       # |x| <= 1
        return (((a + F32(2)) * x - (a + F32(3))) * x * x + F32(1)).astype(F32)

    def far(x):        # 1 < |x| < 2
        return (((a * x - F32(5) * a) * x + F32(8) * a) * x - F32(4) * a).astype(F32)

    weights = np.stack([far(t + F32(1)), near(t), near(F32(1) - t), far(F32(1) - t + F32(1))])
    index = np.clip(i0[None, :] + np.arange(-1, 3)[:, None], 0, in_size - 1)
    return index, weights.astype(F32)


def aa_taps(in_size: int, out_size: int, align_corners: bool, scale=None, cubic=False):
    """(count (out,), index (K, out), weight (K, out)) of interpolate(antialias=True), as ATen's
    _compute_indices_min_size_weights_aa computes them (float32 where ATen's are, double where
    its expressions promote): a triangle (bilinear) or Keys cubic (a = -0.5) filter widened by
    the scale when downsampling, over the input indices [xmin, xmin + count), normalized to
    sum 1."""
    s = area_scale(in_size, out_size, align_corners, scale)
    interp = 4 if cubic else 2
    support = F32(interp * 0.5 * float(s)) if s >= 1 else F32(interp * 0.5)
    invscale = F32(1.0 / float(s)) if s >= 1 else F32(1)
    a = F32(-0.5)

    def filt(x):
        x = np.abs(x.astype(F32))
        if not cubic:
            return np.where(x < 1, F32(1) - x, F32(0)).astype(F32)
        near = ((a + F32(2)) * x - (a + F32(3))) * x * x + F32(1)
        far = ((a * x - F32(5) * a) * x + F32(8) * a) * x - F32(4) * a
        return np.where(x < 1, near, np.where(x < 2, far, F32(0))).astype(F32)

    k = int(np.ceil(float(support))) * 2 + 1          # ATen's max_interp_size
    center = (float(s) * (np.arange(out_size) + 0.5)).astype(F32)
    xmin = np.maximum((center.astype(np.float64) - float(support) + 0.5).astype(np.int64), 0)
    count = np.clip(np.minimum((center.astype(np.float64) + float(support) + 0.5).astype(np.int64), in_size) - xmin,
                    0, k)
    j = np.arange(k)[:, None]
    w = filt(((j + xmin[None, :]) - center.astype(np.float64)[None, :] + 0.5) * float(invscale))
    w = np.where(j < count[None, :], w, F32(0)).astype(F32)
    total = np.zeros(out_size, F32)
    for jj in range(k):              # one at a time in float32, as ATen's total_w
        total = (total + w[jj]).astype(F32)
    w = np.where(total != 0, w / np.where(total != 0, total, F32(1)), w).astype(F32)
    index = np.clip(xmin[None, :] + j, 0, in_size - 1)
    return count, index, w


def _out_size(x_shape, out_size, scales):
    return list(out_size) if out_size is not None else [int(x_shape[-2 + i] * float(scales[i])) for i in range(2)]


def _separable(x, taps_y, taps_x):
    """out = sum_i wy_i * t_i, t_i = sum_j x[yi_i, xi_j] * wx_j, float32, left to right over the
    taps in use (ATen's separable passes: the columns, then the rows)."""
    (ny, yi, wy), (nx, xi, wx) = taps_y, taps_x
    out = np.zeros(x.shape[:-2] + (len(ny), len(nx)), F32)
    for i in range(yi.shape[0]):
        rows = x[..., yi[i], :]
        t = rows[..., xi[0]] * wx[0]
        for j in range(1, xi.shape[0]):
            t = np.where(j < nx, (t + rows[..., xi[j]] * wx[j]).astype(F32), t)
        term = (t * wy[i][:, None]).astype(F32)
        out = np.where((i < ny)[:, None], term if i == 0 else (out + term).astype(F32), out)
    return out


def _resample_taps(kind, in_hw, out_hw, align_corners, scales):
    scales = scales or [None, None]
    taps = []
    for d in range(2):
        if kind == "bicubic":
            index, weight = cubic_taps(in_hw[d], out_hw[d], align_corners, scales[d])
            taps.append((np.full(out_hw[d], 4), index, weight))
        else:
            taps.append(aa_taps(in_hw[d], out_hw[d], align_corners, scales[d], cubic=kind == "bicubic_aa"))
    return taps


def _resample_reference(kind):
    def reference(x, *, out_size=None, align_corners=False, scales=None):
        x = np.asarray(x, F32)
        out_hw = _out_size(x.shape, out_size, scales)
        return _separable(x, *_resample_taps(kind, x.shape[-2:], out_hw, align_corners, scales))
    return reference


upsample_bicubic2d = _resample_reference("bicubic")


def _resample_decline(node, tensors):
    x, y = tensors[node.inputs[0]], tensors[node.outputs[0]]
    if len(x.shape) < 2 or x.dtype != "float32" or y.dtype != "float32":
        return f"{node.op}: {x.dtype} {x.shape} -> {y.dtype} (the kernel takes float32 (..., H, W))"
    return None


def _resample_build(kind):
    def build(ctx, node):
        x, y = node.inputs[0], node.outputs[0]
        sx, sy = ctx.spec(x).shape, ctx.spec(y).shape
        k = kind if kind == "bicubic" else f"{node.attrs['mode']}_aa"
        taps = _resample_taps(k, sx[-2:], sy[-2:], node.attrs.get("align_corners", False), node.attrs.get("scales"))
        words = np.concatenate([np.concatenate([n.astype(np.int32), i.astype(np.int32).ravel(), w.view(np.int32).ravel()])
                                for n, i, w in taps])
        planes = int(np.prod(sx[:-2], dtype=np.int64))
        ny, nx = (int(n.max(initial=0)) for n, _, _ in taps)
        ctx.device.info.check_loop_budget(ny * (nx + 1) + 8, f"resample: {ny} x {nx} taps a value")   # (downscales)
        return [ctx.device.dispatch("resample", [ctx.buffer(x), ctx.buffer(y), ctx.const_buffer(words)],
                                    grid_1d(planes * sy[-2] * sy[-1], LOCAL), local=(LOCAL,),
                                    spec=(taps[0][1].shape[0], taps[1][1].shape[0]),
                                    push=(np.array([planes, sx[-2], sx[-1], 0]), np.array([planes, sy[-2], sy[-1], 0])))]
    return build


def nearest_source(in_size: int, out_size: int, scale=None, exact: bool = False) -> np.ndarray:
    """Source index of each output index along one dim, as ATen's nearest_idx (its 1x and 2x
    shortcuts, then floorf(dst * s) in float32) or nearest_exact_idx (floorf((dst + 0.5) * s),
    the product in double); s = 1/scale where a scale was given, else in/out in float32."""
    dst = np.arange(out_size, dtype=np.int64)
    if not exact and out_size == in_size:
        return dst
    if not exact and out_size == 2 * in_size:
        return dst >> 1
    s = F32(1.0 / scale) if scale is not None and scale > 0 else F32(in_size) / F32(out_size)
    if exact:       # floorf's argument: the double product rounded to float
        src = np.floor(((dst + 0.5) * np.float64(s)).astype(F32))
    else:
        src = np.floor(dst.astype(F32) * s)
    return np.minimum(src.astype(np.int64), in_size - 1)


def _nearest_size(in_size, attrs, i):
    if attrs.get("out_size") is not None:
        return int(attrs["out_size"][i])
    return int(in_size * float(attrs["scales"][i]))     # ATen: static_cast<int64_t>(input_size * scale)


def nearest_index(shape, out_shape, scales=None, exact=False) -> np.ndarray:
    """The row-major flat index into x (shape (..., H, W)) of each element of the output."""
    *lead, h, w = shape
    scales = scales or [None, None]
    rows = nearest_source(h, out_shape[-2], scales[0], exact)
    cols = nearest_source(w, out_shape[-1], scales[1], exact)
    planes = np.arange(int(np.prod(lead, dtype=np.int64)), dtype=np.int64) * (h * w)
    return (planes[:, None, None] + rows[None, :, None] * w + cols[None, None, :]).reshape(-1)


def upsample_nearest2d(x, *, scales=None, exact=False, out_size=None):
    x = np.asarray(x)
    h, w = x.shape[-2:]
    attrs = {"scales": scales, "out_size": out_size}
    out_shape = (*x.shape[:-2], _nearest_size(h, attrs, 0), _nearest_size(w, attrs, 1))
    return x.reshape(-1)[nearest_index(x.shape, out_shape, scales, exact)].reshape(out_shape)


def nearest_attrs(fx_node, out_shape) -> dict:
    """The attrs of an FX aten.upsample_nearest2d / _upsample_nearest_exact2d (.vec: output_size,
    scale_factors; .default: output_size, scales_h, scales_w): scale factors where given (the
    output size follows from the input's), else the output size."""
    a = list(fx_node.args) + [None] * 4
    scales = a[2] if str(fx_node.target).endswith(".vec") else (None if a[2] is None and a[3] is None else a[2:4])
    scales = None if scales is None or None in scales else [float(v) for v in scales]
    return {"scales": scales, "exact": "exact" in str(fx_node.target),
            "out_size": None if scales is not None else [int(d) for d in out_shape[-2:]]}


def _nearest_build(ctx, node):
    from .shape import take_steps
    x, y = node.inputs[0], node.outputs[0]
    sx, sy = ctx.spec(x), ctx.spec(y)
    want = tuple(sx.shape[:-2]) + tuple(_nearest_size(sx.shape[-2 + i], node.attrs, i) for i in range(2))
    if tuple(sy.shape) != want:
        raise ValueError(f"{node.name}: output {tuple(sy.shape)}, nearest upsampling of {tuple(sx.shape)} gives {want}")
    idx = nearest_index(sx.shape, sy.shape, node.attrs.get("scales"), node.attrs.get("exact", False))
    return take_steps(ctx, node, x, y, idx)


def _nearest_decline(node, tensors):
    x, y = tensors[node.inputs[0]], tensors[node.outputs[0]]
    if len(x.shape) < 2 or x.dtype != y.dtype:
        return f"upsample_nearest2d: {x.dtype} {x.shape} -> {y.dtype}"
    return None


def _decline(node, tensors):
    x, y = tensors[node.inputs[0]], tensors[node.outputs[0]]
    if len(x.shape) != 4 or x.dtype != y.dtype or x.dtype not in ("float32", "int8"):
        return f"upsample_bilinear2d: {x.dtype} {x.shape} -> {y.dtype} (the kernel takes 4-D float32 or int8)"
    if x.dtype == "int8" and None not in (x.scale, y.scale) and (x.scale, x.zero_point) != (y.scale, y.zero_point):
        return "upsample_bilinear2d: int8 in and out quantized differently"
    return None


def _build(ctx, node):
    x, y = node.inputs[0], node.outputs[0]
    sx, sy = ctx.spec(x), ctx.spec(y)
    (y0, y1, wy0, wy1), (x0, x1, wx0, wx1) = _taps(sx.shape, sy.shape, node.attrs.get("align_corners", False),
                                                   node.attrs.get("scales"))
    int8 = sx.dtype == "int8"
    if int8:
        (wy0, wy1), (wx0, wx1) = _q(wy1), _q(wx1)
    else:
        wy0, wy1, wx0, wx1 = (np.asarray(w, F32).view(np.int32) for w in (wy0, wy1, wx0, wx1))
    taps = np.concatenate([np.asarray(a).astype(np.int32) for a in (y0, y1, wy0, wy1, x0, x1, wx0, wx1)])
    # upsample_bilinear.comp BLOCKS: 4W4C to 4W4C a block an invocation, a word's 4 channels at once
    blocks = int8 and sx.layout == sy.layout == "4W4C"
    n = sy.device_words() // 4 if blocks else sy.device_words() if int8 else int(np.prod(sy.shape))
    return [ctx.device.dispatch(
        "upsample_bilinear", [ctx.buffer(x), ctx.buffer(y), ctx.const_buffer(taps)], grid_1d(n, LOCAL),
        local=(LOCAL,), spec=(packing.LAYOUT_IDS.get(sx.layout, 0), packing.LAYOUT_IDS.get(sy.layout, 0)),
        push=(packing.as_nchw(sx.shape), packing.as_nchw(sy.shape)),
        defines=["INT8", "BLOCKS"] if blocks else ["INT8" if int8 else "FLOAT"])]


@register_op
class UpsampleBilinear2d:
    """Bilinear upsampling of (N, C, H, W), float32 or int8 (one quantization), align_corners either way."""
    name = "upsample_bilinear2d"
    shaders = ("upsample_bilinear",)
    layouts = packing.LAYOUTS
    reference = staticmethod(upsample_bilinear2d)
    build = staticmethod(_build)
    decline = staticmethod(_decline)


@register_op
class UpsampleNearest2d:
    """Nearest (or nearest-exact) upsampling of (..., H, W), any dtype: a gather whose index map
    is made for the shape it is built for."""
    name = "upsample_nearest2d"
    shaders = ("repack", "float_copy")
    layouts = packing.LAYOUTS
    reference = staticmethod(upsample_nearest2d)
    build = staticmethod(_nearest_build)
    decline = staticmethod(_nearest_decline)


@register_op
class UpsampleBicubic2d:
    """Bicubic upsampling of float32 (..., H, W), align_corners either way (ATen's taps, A = -0.75)."""
    name = "upsample_bicubic2d"
    shaders = ("resample",)
    reference = staticmethod(upsample_bicubic2d)
    build = staticmethod(_resample_build("bicubic"))
    decline = staticmethod(_resample_decline)


@register_op
class UpsampleAntialias2d:
    """interpolate(mode="bilinear" / "bicubic", antialias=True) of float32 (..., H, W) (attrs mode,
    out_size, align_corners, scales): the resize torchvision's Resize does on tensors, baked into
    a model's preprocessing. ATen's antialias taps (aa_taps), ATen's order of the sums."""
    name = "upsample_antialias2d"
    shaders = ("resample",)
    build = staticmethod(_resample_build("antialias"))
    decline = staticmethod(_resample_decline)

    def reference(x, *, mode, **attrs):
        return _resample_reference(f"{mode}_aa")(x, **attrs)


GRID_MODES = {0: "bilinear", 1: "nearest"}           # ATen's interpolation_mode codes with a kernel
GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


def _reflect(coord, twice_low, twice_high):
    """ATen's reflect_coordinates: coord reflected into [twice_low / 2, twice_high / 2]."""
    if twice_low == twice_high:
        return np.zeros_like(coord)
    low, span = F32(twice_low / 2), F32((twice_high - twice_low) / 2)
    coord = np.abs(coord - low)
    extra, flips = np.fmod(coord, span), np.floor(coord / span)
    return np.where(flips % 2 == 0, extra + low, span - extra + low).astype(F32)


def grid_source(coord, size, padding_mode, align_corners):
    """A normalized coordinate in [-1, 1] to a pixel coordinate, then border / reflection
    padding, in float32 as ATen's CPU kernel computes it (GridSamplerKernel.cpp,
    ComputeLocationBase: (c + 1) * ((size - 1) / 2), or (c + 1) * (size / 2) - 0.5)."""
    coord = np.asarray(coord, F32)
    if align_corners:
        coord = ((coord + F32(1)) * (F32(size - 1) / F32(2))).astype(F32)
    else:
        coord = ((coord + F32(1)) * (F32(size) / F32(2)) - F32(0.5)).astype(F32)
    if padding_mode == 2:
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
    if padding_mode in (1, 2):
        coord = np.clip(coord, F32(0), F32(size - 1))
    return coord


def grid_sample(x, grid, *, mode=0, padding_mode=0, align_corners=False):
    """torch.nn.functional.grid_sample on float32 x (N, C, H, W), grid (N, Ho, Wo, 2): bilinear
    (mode 0) or nearest (1, round half to even) with padding 0 zeros, 1 border, 2 reflection."""
    x, grid = np.asarray(x, F32), np.asarray(grid, F32)
    n, c, h, w = x.shape
    ix = grid_source(grid[..., 0], w, padding_mode, align_corners)    # (N, Ho, Wo)
    iy = grid_source(grid[..., 1], h, padding_mode, align_corners)
    batch = np.arange(n)[:, None, None]

    def tap(yy, xx):     # x at integer (yy, xx) per output, 0 outside: (N, C, Ho, Wo)
        inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        vals = x[batch, :, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]      # (N, Ho, Wo, C)
        return np.where(inside[..., None], vals, F32(0)).transpose(0, 3, 1, 2)

    if mode == 1:
        return tap(np.rint(iy).astype(np.int64), np.rint(ix).astype(np.int64)).astype(F32)
    x0, y0 = np.floor(ix), np.floor(iy)
    we, wn = (ix - x0).astype(F32), (iy - y0).astype(F32)         # toward the east / south corner
    ww, ws = (F32(1) - we).astype(F32), (F32(1) - wn).astype(F32)
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    out = tap(y0, x0) * (ws * ww)[:, None]
    out = (out + tap(y0, x0 + 1) * (ws * we)[:, None]).astype(F32)
    out = (out + tap(y0 + 1, x0) * (wn * ww)[:, None]).astype(F32)
    return (out + tap(y0 + 1, x0 + 1) * (wn * we)[:, None]).astype(F32)


def _grid_decline(node, tensors):
    x, grid = (tensors[t] for t in node.inputs[:2])
    if x.dtype != "float32" or grid.dtype != "float32" or len(x.shape) != 4:
        return f"grid_sample: {x.dtype} {x.shape} by {grid.dtype} (the kernel takes float32 (N, C, H, W))"
    return None


def _grid_build(ctx, node):
    x, grid, y = node.inputs[0], node.inputs[1], node.outputs[0]
    shape, out = ctx.spec(x).shape, ctx.spec(y).shape
    a = node.attrs
    return [ctx.device.dispatch("grid_sample", [ctx.buffer(x), ctx.buffer(grid), ctx.buffer(y)],
                                grid_1d(int(np.prod(out)), LOCAL), local=(LOCAL,),
                                spec=(int(a["mode"]), int(a["padding_mode"]), int(bool(a["align_corners"]))),
                                push=(np.array(shape), np.array(out)))]


@register_op
class GridSample:
    """torch's grid_sample on float32 (N, C, H, W) (attrs mode 0 bilinear / 1 nearest,
    padding_mode 0 zeros / 1 border / 2 reflection, align_corners): spatial transformers,
    flow warping, deformable attention's sampling."""
    name = "grid_sample"
    shaders = ("grid_sample",)
    reference = staticmethod(grid_sample)
    build = staticmethod(_grid_build)
    decline = staticmethod(_grid_decline)
