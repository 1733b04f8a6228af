"""Max unpooling of a max pool's positions: max_unpool2d_q8 (int8, 4W4C) and max_unpool2d
(float32), the ops normalize_ops makes of a max_unpool2d whose indices a max_pool2d_with_indices
gave (ENet's and SegNet's decoders), with the references they share: max_pool_indices (PyTorch's
max_pool2d_with_indices indices) and max_unpool. The pool geometry and the 4W4C helpers are
vkq/ops/pool.py's; a module of its own so that pool.py stays under 800 lines.

  max_unpool2d_q8(v, x)   attrs kernel, stride, padding, dilation [2], ceil_mode (the pool's),
                          output_size [2], zero_point (v's)
                          out = v at each window's first maximum in x, zero_point elsewhere
"""
from __future__ import annotations

import numpy as np

from .. import packing
from ..device import grid_1d
from ..registry import register_op
from .pool import LOCAL, _blocks, _check_out_shape, _spatial_specs, pool_output_size


def max_pool_indices(x, kernel, stride, padding, dilation, ceil_mode):
    """PyTorch's max_pool2d_with_indices indices of x (..., H, W): each window's first maximum
    (taps in row-major order, padding skipped; a NaN wins, as in ATen) as the flat position
    ih * W + iw in x's plane."""
    x = np.asarray(x)
    lead, (h, w) = x.shape[:-2], x.shape[-2:]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh = pool_output_size(h, kh, sh, ph, dh, ceil_mode)
    ow = pool_output_size(w, kw, sw, pw, dw, ceil_mode)
    best = np.full(lead + (oh, ow), -np.inf)
    index = np.zeros(lead + (oh, ow), np.int64)
    taken = np.zeros(lead + (oh, ow), bool)       # the window's first tap is taken, -inf too
    for i in range(kh):
        rows = np.arange(oh) * sh - ph + i * dh
        for j in range(kw):
            cols = np.arange(ow) * sw - pw + j * dw
            valid = ((rows >= 0) & (rows < h))[:, None] & ((cols >= 0) & (cols < w))[None, :]
            tap = x[..., np.clip(rows, 0, h - 1), :][..., np.clip(cols, 0, w - 1)].astype(np.float64)
            take = valid & (~taken | (tap > best) | np.isnan(tap))
            taken |= take
            best = np.where(take, tap, best)
            index = np.where(take, rows[:, None] * w + cols[None, :], index)
    return index


def max_unpool(v, indices, output_size, fill):
    """PyTorch's max_unpool2d: v (..., VH, VW) placed at the flat positions `indices` of each
    (OH, OW) plane, `fill` elsewhere; where two values land on one position the later one (in
    v's order) stays, as ATen's CPU kernel leaves it. An index outside the plane raises, as ATen."""
    v, indices = np.asarray(v), np.asarray(indices)
    lead, size = v.shape[:-2], int(output_size[0]) * int(output_size[1])
    planes = int(np.prod(lead, dtype=np.int64))
    flat, idx = v.reshape(planes, -1), indices.reshape(planes, -1)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise ValueError(f"max_unpool2d: index {int(idx.max() if idx.max() >= size else idx.min())} is outside "
                         f"the output plane of {tuple(output_size)}")
    out = np.full((planes, size), fill, v.dtype)
    key = (np.arange(planes)[:, None] * size + idx).reshape(-1)[::-1]     # the last write first
    where, first = np.unique(key, return_index=True)
    out.reshape(-1)[where] = flat.reshape(-1)[::-1][first]
    return out.reshape(lead + tuple(int(s) for s in output_size))


def _unpool_reference(v, x, fill, *, kernel, stride, padding, dilation, ceil_mode, output_size):
    return max_unpool(v, max_pool_indices(x, kernel, stride, padding, dilation, ceil_mode), output_size, fill)


@register_op
class MaxUnpool2dQ8:
    """vkq.max_unpool2d on int8 (ENet's and SegNet's decoders): v placed where the max pool of x
    (attrs kernel, stride, padding, dilation, ceil_mode: the pool's) found each window's first
    maximum, v's zero point (0.0) elsewhere, in an output of output_size [OH, OW]; qparams
    v's. x's int8 values order as its floats do, so the positions are PyTorch's indices of the
    dequantized x. Vulkan (max_unpool): windows that do not overlap (kernel <= stride, no
    dilation: every pool that unpooling is used with) into at least H x W positions; otherwise
    two windows can name one position, and the reference's order decides (CPU)."""
    name = "max_unpool2d_q8"
    shaders = ("max_unpool",)
    layouts = ("4W4C",)

    def reference(v, x, *, zero_point, **geometry):
        return _unpool_reference(np.asarray(v, np.int8), np.asarray(x, np.int8), zero_point, **geometry)

    def decline(node, tensors):
        return _unpool_decline(node, tensors)

    def build(ctx, node):
        _, _, vs, outs = _spatial_specs(ctx, node)
        xs = packing.as_nchw(ctx.spec(node.inputs[1]).shape)
        _check_out_shape(node, outs, vs[:2] + tuple(node.attrs["output_size"]))
        zp_word = (node.attrs["zero_point"] & 0xFF) * 0x01010101    # v's zero point in every byte
        return [_unpool_dispatch(ctx, node, [], xs, vs, outs, _blocks(outs), (zp_word,))]


def _unpool_decline(node, tensors):
    a = node.attrs
    if any(k > s for k, s in zip(a["kernel"], a["stride"])) or any(d != 1 for d in a["dilation"]):
        return (f"{node.op}: kernel {a['kernel']} stride {a['stride']} dilation {a['dilation']}: windows that "
                f"overlap can place two values in one position (the kernel takes kernel <= stride, no dilation)")
    h, w = tensors[node.inputs[1]].shape[-2:]
    if a["output_size"][0] * a["output_size"][1] < h * w:
        return f"{node.op}: an output of {a['output_size']} cannot hold every index into {h} x {w}"
    return None


def _unpool_dispatch(ctx, node, defines, xs, vs, outs, invocations, push=()):
    """max_unpool with the pool's geometry and the shapes (N, C, H, W of x; v's and the
    output's H, W) as specialization constants."""
    a = node.attrs
    geo = [*a["kernel"], *a["stride"], *a["padding"], *xs, *vs[2:], *outs[2:]]
    return ctx.device.dispatch("max_unpool", [ctx.buffer(t) for t in (*node.inputs, *node.outputs)],
                               grid_1d(invocations, LOCAL), local=(LOCAL,), spec=geo, defines=defines, push=push)


@register_op
class MaxUnpool2d:
    """vkq.max_unpool2d on float32 (..., H, W) (attrs as max_unpool2d_q8's, 0.0 elsewhere; the
    linear-only schemes leave a CNN's pools float): max_unpool's FLOAT variant, one output value
    an invocation; exact (values are moved, not computed)."""
    name = "max_unpool2d"
    shaders = ("max_unpool",)

    def reference(v, x, **geometry):
        return _unpool_reference(np.asarray(v, np.float32), np.asarray(x, np.float32), 0.0, **geometry)

    def decline(node, tensors):
        v, x = (tensors[t] for t in node.inputs[:2])
        if v.dtype != "float32" or x.dtype != "float32" or len(v.shape) < 3:
            return f"{node.op}: {v.dtype} {v.shape} (the kernel takes float32 (..., H, W))"
        return _unpool_decline(node, tensors)

    def build(ctx, node):
        vs, xs, outs = (tuple(ctx.spec(t).shape) for t in (*node.inputs[:2], node.outputs[0]))
        _check_out_shape(node, outs, vs[:-2] + tuple(node.attrs["output_size"]))
        planes = int(np.prod(vs[:-2]))
        return [_unpool_dispatch(ctx, node, ["FLOAT"], (planes, 1, *xs[-2:]), (planes, 1, *vs[-2:]),
                                 (planes, 1, *outs[-2:]), planes * outs[-2] * outs[-1])]
