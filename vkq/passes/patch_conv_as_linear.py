"""patch_conv_as_linear: a convolution whose windows do not overlap, as a linear over patches.

The quantizer runs this before annotating under the dynamic and weight-only schemes
(VkqQuantizer.transform_for_annotation), which quantize linears only: a vision transformer's
patch embedding (kernel = stride, no padding) or a pointwise (1 x 1) conv would otherwise stay a
float conv on the CPU. With kernel k = stride, padding 0, dilation 1, groups 1, a static C, H, W:

  y = conv2d(x, w, b, k)
    = permute(linear(reshape(permute(reshape(x[:, :, :OH*kh, :OW*kw], (N, C, OH, kh, OW, kw)),
                                     (N, OH, OW, C, kh, kw)), (N, OH, OW, C*kh*kw)),
                     w.reshape(OC, C*kh*kw), b), (N, OC, OH, OW))

the rows PyTorch's conv leaves out (H not a multiple of kh) sliced off first. The same
multiply-adds, on the linear kernels; the moves are float copies on the device.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ._graph import add_constant, arg, aten, const_value, finish, is_call, pair, val


def _rewrite(gm: GraphModule, node: Node) -> Node | None:
    x, wnode, bias = node.args[0], node.args[1], arg(node, 2, "bias")
    stride, padding = pair(arg(node, 3, "stride", 1)), arg(node, 4, "padding", 0)
    dilation, groups = pair(arg(node, 5, "dilation", 1)), int(arg(node, 6, "groups", 1))
    w, vx = const_value(gm, wnode), val(x)
    if w is None or w.dim() != 4 or not isinstance(vx, torch.Tensor) or vx.dim() != 4 or isinstance(padding, str):
        return None
    k = list(w.shape[2:])
    if stride != k or pair(padding) != [0, 0] or dilation != [1, 1] or groups != 1:
        return None
    if bias is not None and const_value(gm, bias) is None:
        return None
    n, c, h, wd = vx.shape
    if not all(isinstance(d, int) for d in (c, h, wd)):
        return None     # a dynamic map: the patch reshape is made for one size
    oc, (oh, ow) = w.shape[0], (h // k[0], wd // k[1])
    g = gm.graph
    lw = add_constant(gm, f"{node.name}_as_linear", w.reshape(oc, -1).float(), node)
    with g.inserting_before(node):
        part = x
        for dim, keep, size in ((2, oh * k[0], h), (3, ow * k[1], wd)):
            if keep != size:
                part = g.call_function(aten.slice.Tensor, (part, dim, 0, keep))
                part.meta["val"] = val(part.args[0]).narrow(dim, 0, keep)
        steps = [(aten.reshape.default, [-1, c, oh, k[0], ow, k[1]]), (aten.permute.default, [0, 2, 4, 1, 3, 5]),
                 (aten.reshape.default, [-1, oh, ow, c * k[0] * k[1]])]
        for target, how in steps:
            nxt = g.call_function(target, (part, how))
            nxt.meta["val"] = target(val(part), how)
            part = nxt
        lin = g.call_function(aten.linear.default, (part, lw, bias))
        lin.meta.update({key: v for key, v in node.meta.items() if key != "val"})
        lin.meta["val"] = vx.new_empty((*val(part).shape[:3], oc))
        out = g.call_function(aten.permute.default, (lin, [0, 3, 1, 2]))
        out.meta["val"] = val(node)
    return out


def patch_conv_as_linear(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        if is_call(node, {aten.conv2d.default}):
            new = _rewrite(gm, node)
            if new is not None:
                node.replace_all_uses_with(new)
                gm.graph.erase_node(node)
                changed = True
    return finish(gm, changed)
