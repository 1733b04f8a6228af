"""patch_conv_as_linear: a convolution whose windows do not overlap, as a linear over patches.

The quantizer runs this before annotating under the dynamic and weight-only schemes
(VkqQuantizer.transform_for_annotation), which quantize linears only: a vision transformer's
patch embedding (kernel = stride, no padding) or a pointwise (1 x 1) conv would otherwise stay a
float conv on the CPU. With kernel k = stride, padding 0, dilation 1, groups 1, a static C, H, W
(conv1d on (N, C, L) likewise, over one spatial dim):

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
    """conv2d on (N, C, H, W) or conv1d on (N, C, L): the same steps over 2 or 1 spatial dims."""
    x, wnode, bias = node.args[0], node.args[1], arg(node, 2, "bias")
    w, vx = const_value(gm, wnode), val(x)
    if w is None or not isinstance(vx, torch.Tensor) or vx.dim() != w.dim() or vx.dim() not in (3, 4):
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
    split = [-1, c] + [v for o, kk in zip(outs, k) for v in (o, kk)]           # (N, C, o1, k1[, o2, k2])
    order = [0] + [2 + 2 * i for i in range(sd)] + [1] + [3 + 2 * i for i in range(sd)]
    with g.inserting_before(node):
        part = x
        for dim, (o, kk, size) in enumerate(zip(outs, k, sizes), start=2):
            if o * kk != size:
                part = g.call_function(aten.slice.Tensor, (part, dim, 0, o * kk))
                part.meta["val"] = val(part.args[0]).narrow(dim, 0, o * kk)
        for target, how in ((aten.reshape.default, split), (aten.permute.default, order),
                            (aten.reshape.default, [-1, *outs, c * math.prod(k)])):
            nxt = g.call_function(target, (part, how))
            nxt.meta["val"] = target(val(part), how)
            part = nxt
        lin = g.call_function(aten.linear.default, (part, lw, bias))
        lin.meta.update({key: v for key, v in node.meta.items() if key != "val"})
        lin.meta["val"] = vx.new_empty((*val(part).shape[:-1], oc))
        out = g.call_function(aten.permute.default, (lin, [0, sd + 1, *range(1, sd + 1)]))
        out.meta["val"] = val(node)
    return out


def patch_conv_as_linear(gm: GraphModule) -> bool:
    return finish(gm, replace_each(gm, {aten.conv2d.default, aten.conv1d.default}, _rewrite))
