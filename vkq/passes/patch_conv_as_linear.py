"""patch_conv_as_linear: a convolution whose windows do not overlap, as a linear over patches.

The quantizer runs this before annotating under the dynamic and weight-only schemes
(VkqQuantizer.transform_for_annotation), which quantize linears only: a vision transformer's
patch embedding (kernel = stride, no padding) or a pointwise (1 x 1) conv would otherwise stay a
float conv on the CPU. Under every scheme, a conv3d so shaped (a video transformer's tubelet
embedding: VideoMAE, TimeSformer, ViViT), which has no kernel of its own. With kernel k = stride,
padding 0, dilation 1, groups 1, a static C, H, W (conv1d on (N, C, L) and conv3d on
(N, C, T, H, W) likewise, over one or three spatial dims):

  y = conv2d(x, w, b, k)
    = permute(linear(reshape(permute(reshape(x[:, :, :OH*kh, :OW*kw], (N, C, OH, kh, OW, kw)),
                                     (N, OH, OW, C, kh, kw)), (N, OH, OW, C*kh*kw)),
                     w.reshape(OC, C*kh*kw), b), (N, OC, OH, OW))

the rows PyTorch's conv leaves out (H not a multiple of kh) sliced off first. The same
multiply-adds, on the linear kernels; the moves are float copies on the device.
"""
from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node

from ._graph import add_constant, arg, aten, const_value, finish, replace_each, val


def _rewrite(gm: GraphModule, node: Node) -> Node | None:
    """conv2d on (N, C, H, W), conv1d on (N, C, L) or conv3d on (N, C, T, H, W): the same steps
    over 2, 1 or 3 spatial dims."""
    x, wnode, bias = node.args[0], node.args[1], arg(node, 2, "bias")
    w, vx = const_value(gm, wnode), val(x)
    if w is None or not isinstance(vx, torch.Tensor) or vx.dim() != w.dim() or vx.dim() not in (3, 4, 5):
        return None
    sd = vx.dim() - 2          # spatial dims
    norm = lambda v: (list(v) * sd if len(v) == 1 else list(v)) if isinstance(v, (list, tuple)) else [v] * sd
    stride, padding = norm(arg(node, 3, "stride", 1)), arg(node, 4, "padding", 0)
    dilation, groups = norm(arg(node, 5, "dilation", 1)), int(arg(node, 6, "groups", 1))
    k = list(w.shape[2:])
    if isinstance(padding, str) or stride != k or norm(padding) != [0] * sd or dilation != [1] * sd or groups != 1:
        return None
    if bias is not None and const_value(gm, bias) is None:
        return None
    c, sizes = vx.shape[1], list(vx.shape[2:])
    if not all(isinstance(d, int) for d in (c, *sizes)):
        return None     # a dynamic map: the patch reshape is made for one size
    oc, outs = w.shape[0], [d // kk for d, kk in zip(sizes, k)]
    g = gm.graph
    lw = add_constant(gm, f"{node.name}_as_linear", w.reshape(oc, -1).float(), node)

    def call(target, *args):
        nxt = g.call_function(target, args)
        nxt.meta["val"] = target(*[val(a) if isinstance(a, Node) else a for a in args])
        return nxt
    with g.inserting_before(node):
        part = x
        for dim, (o, kk, size) in enumerate(zip(outs, k, sizes), start=2):
            if o * kk != size:
                part = call(aten.slice.Tensor, part, dim, 0, o * kk)
        frames = None
        if sd == 3:     # time into the batch and the channels first: 2-D patches of (N*T', C*kt, H, W)
            frames, kt, hw = outs[0], k[0], [o * kk for o, kk in zip(outs[1:], k[1:])]
            part = call(aten.reshape.default, part, [-1, c, frames, kt, *hw])
            part = call(aten.permute.default, part, [0, 2, 1, 3, 4, 5])
            part = call(aten.reshape.default, part, [-1, c * kt, *hw])
            c, outs, k = c * kt, outs[1:], k[1:]
        dims = len(outs)
        split = [-1, c] + [v for o, kk in zip(outs, k) for v in (o, kk)]           # (N, C, o1, k1[, o2, k2])
        order = [0] + [2 + 2 * i for i in range(dims)] + [1] + [3 + 2 * i for i in range(dims)]
        part = call(aten.reshape.default, part, split)
        part = call(aten.permute.default, part, order)
        part = call(aten.reshape.default, part, [-1, *outs, c * math.prod(k)])
        lin = g.call_function(aten.linear.default, (part, lw, bias))
        lin.meta.update({key: v for key, v in node.meta.items() if key != "val"})
        lin.meta["val"] = vx.new_empty((*val(part).shape[:-1], oc))
        if frames is not None:
            lin = call(aten.reshape.default, lin, [-1, frames, *outs, oc])
        out = g.call_function(aten.permute.default, (lin, [0, sd + 1, *range(1, sd + 1)]))
        out.meta["val"] = val(node)
    return out


def patch_conv_as_linear(gm: GraphModule) -> bool:
    return finish(gm, replace_each(gm, {aten.conv2d.default, aten.conv1d.default, aten.conv3d.default}, _rewrite))


def patch_conv3d_as_linear(gm: GraphModule) -> bool:
    """The static scheme's share: a conv3d's tubelets (its conv2d and conv1d have int8 kernels;
    a 1x1x1 conv3d is a pointwise conv2d over frames in three_d_as_two_d, with no reshapes)."""
    def tubelets(gm, node):
        w = const_value(gm, node.args[1])
        return None if w is None or tuple(w.shape[2:]) == (1, 1, 1) else _rewrite(gm, node)
    return finish(gm, replace_each(gm, {aten.conv3d.default}, tubelets))
