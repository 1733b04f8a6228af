"""conv_transpose_as_conv: a transposed convolution as a convolution and a pixel shuffle.

The quantizer runs this before annotating (VkqQuantizer.transform_for_annotation). A
conv_transpose2d with stride s equal in H and W (or 1 in one of them, as a 1-D one has after
one_d_as_two_d: the phases are then interleaved along the other dim by a reshape, a permute and a
reshape), dilation 1, any kernel, padding, output padding and groups:

  y = conv_transpose2d(x, w, b, s, p, op, g)
    = crop(pixel_shuffle(conv2d(x, G, b repeated s*s times, padding M - 1, groups g), s), p)

For an output row Y, the taps that reach it are those with ky = (Y + p) mod s + m*s (m = 0, 1,
...), reading input row (Y + p) div s - m: phase a = (Y + p) mod s is a plain correlation of x
with the kernel rows a, a + s, ... reversed. G stacks, for each output channel oc and phase
(a, b), that sub-kernel of M x M taps (M = ceil(k / s), zero where a + m*s >= k) as output
channel oc*s*s + a*s + b, the order pixel_shuffle interleaves; the shuffled map starts at row
-p, so rows p .. p + H_out - 1 are the output. The same multiply-adds as the transposed conv,
on the int8 conv kernels; the shuffle and crop move int8 words (`take`, `slice`).

With a dynamic batch, height or width the shuffle is a view (N, OC, s, s, Hc, Wc), a permute and
two flattens, its sizes read from the graph (sym_size), as pixel_shuffle's `take` is an index map
for one size; the crop drops M*s + p - k - output_padding rows after the output at every size, so
it slices from the end by that constant.
"""
from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node

from ._graph import add_constant, arg, aten, const_value, finish, is_call, pair, replace_each, val

# an activation that is the transposed conv's only user moves before the shuffle (elementwise:
# it commutes with the shuffle and the crop), next to the conv that the quantizer fuses it into
ACTIVATIONS = {aten.relu.default, aten.relu6.default, aten.hardtanh.default}


def phase_weights(w: torch.Tensor, s, m: tuple[int, int], groups: int) -> torch.Tensor:
    """conv2d weights (OC*s_h*s_w, C/g, M_h, M_w) for conv_transpose2d weights w (C, OC/g, k_h,
    k_w) and stride s (an int or (s_h, s_w)): output channel oc*s_h*s_w + a*s_w + b holds phase
    (a, b) of oc."""
    sh, sw = pair(s)
    c, ocg, kh, kw = w.shape
    cg = c // groups
    g = torch.zeros(groups * ocg * sh * sw, cg, m[0], m[1], dtype=w.dtype)
    for gi in range(groups):
        wg = w[gi * cg:(gi + 1) * cg]                                   # (C/g, OC/g, kh, kw)
        for a in range(sh):
            for b in range(sw):
                rows = (gi * ocg + torch.arange(ocg)) * sh * sw + a * sw + b
                for t in range(m[0]):
                    ky = a + (m[0] - 1 - t) * sh
                    for u in range(m[1]):
                        kx = b + (m[1] - 1 - u) * sw
                        if ky < kh and kx < kw:
                            g[rows, :, t, u] = wg[:, :, ky, kx].T
    return g


def _rewrite(gm: GraphModule, node: Node) -> Node | None:
    x, wnode = node.args[0], node.args[1]
    bias = arg(node, 2, "bias", None)
    stride, padding = pair(arg(node, 3, "stride", 1)), pair(arg(node, 4, "padding", 0))
    out_pad, groups = pair(arg(node, 5, "output_padding", 0)), int(arg(node, 6, "groups", 1))
    dilation = pair(arg(node, 7, "dilation", 1))
    w = const_value(gm, wnode)
    vx, vy = val(x), val(node)
    if w is None or w.dim() != 4 or not isinstance(vx, torch.Tensor) or vx.dim() != 4 or dilation != [1, 1] \
            or (stride[0] != stride[1] and 1 not in stride):
        return None     # (unequal strides: one of them 1, as a 1-D transposed conv has)
    if bias is not None and const_value(gm, bias) is None:
        return None
    # dynamic dims: the phases are interleaved by views and a permute (pixel_shuffle's index map
    # is made for one size), the crop counted from both ends (what it drops is the same at every size)
    dynamic = not all(isinstance(d, int) for d in (*vx.shape, *vy.shape))
    k = w.shape[2:]
    # taps per phase; one more where the output (with its output padding) reaches past them
    m = tuple(max(math.ceil(k[i] / stride[i]), math.ceil((k[i] - padding[i] + out_pad[i]) / stride[i]))
              for i in range(2))
    oc, phases = w.shape[1] * groups, stride[0] * stride[1]
    gw = add_constant(gm, f"{node.name}_phases", phase_weights(w.float(), stride, m, groups), node)
    gb = None
    if bias is not None:
        gb = add_constant(gm, f"{node.name}_phase_bias", const_value(gm, bias).float().repeat_interleave(phases), node)
    users = list(node.users)
    act = users[0] if len(users) == 1 and is_call(users[0], ACTIVATIONS) else None
    with gm.graph.inserting_before(node):
        conv = gm.graph.call_function(aten.conv2d.default, (x, gw, gb, [1, 1], [m[0] - 1, m[1] - 1], [1, 1], groups))
        top = conv
        if act is not None:      # before the shuffle, where the quantizer fuses it into the conv
            top = gm.graph.call_function(act.target, (conv, *act.args[1:]), dict(act.kwargs))
        n, _, h, wd = vx.shape
        hc, wc = h + m[0] - 1, wd + m[1] - 1                # the conv's output
        full = (hc * stride[0], wc * stride[1])
        if dynamic:
            shuffle, vals = _interleave_symbolic(gm, top, (n, oc, hc, wc), stride, vx)
        elif stride[0] == stride[1]:
            shuffle = gm.graph.call_function(aten.pixel_shuffle.default, (top, stride[0]))
        else:        # phases along one dim: (N, OC, s, H, W) -> (N, OC, H, W, s) (or H's) -> interleaved
            s, dim = (stride[1], 4) if stride[0] == 1 else (stride[0], 3)
            split = gm.graph.call_function(aten.reshape.default, (top, [n, oc, s, hc, wc]))
            order = [0, 1, 3, 4, 2] if dim == 4 else [0, 1, 3, 2, 4]
            moved = gm.graph.call_function(aten.permute.default, (split, order))
            shuffle = gm.graph.call_function(aten.reshape.default, (moved, [n, oc, *full]))
            split.meta["val"] = vx.new_empty((n, oc, s, hc, wc))
            moved.meta["val"] = vx.new_empty(tuple([n, oc, s, hc, wc][i] for i in order))
        # what the crop drops after the output: full - padding - out = m*s + padding - k - output padding
        tail = [m[i] * stride[i] + padding[i] - k[i] - out_pad[i] for i in range(2)]
        crop = [padding[i] != 0 or tail[i] != 0 for i in range(2)]
        end = [-tail[i] if tail[i] else None for i in range(2)] if dynamic else \
            [padding[i] + vy.shape[2 + i] for i in range(2)]
        rows = gm.graph.call_function(aten.slice.Tensor, (shuffle, 2, padding[0], end[0])) if crop[0] else shuffle
        cols = gm.graph.call_function(aten.slice.Tensor, (rows, 3, padding[1], end[1])) if crop[1] else rows
    conv.meta.update({k_: v for k_, v in node.meta.items() if k_ != "val"})
    conv.meta["val"] = vx.new_empty((n, oc * phases, hc, wc))
    if act is not None:
        top.meta.update({k_: v for k_, v in act.meta.items() if k_ != "val"})
        top.meta["val"] = conv.meta["val"]
        act.replace_all_uses_with(node)      # the activation now runs before the crop
        gm.graph.erase_node(act)
    if dynamic:
        for node_, v in vals:
            node_.meta["val"] = v
    shuffle.meta["val"] = vx.new_empty((n, oc, *full))
    if crop[0]:
        rows.meta["val"] = vx.new_empty((n, oc, vy.shape[2], full[1]))
    cols.meta["val"] = vy
    return cols


def _interleave_symbolic(gm: GraphModule, top: Node, shape, stride, vx):
    """(N, OC*sh*sw, Hc, Wc) -> (N, OC, sh, sw, Hc, Wc) -> (N, OC, Hc, sh, Wc, sw) -> (N, OC, Hc*sh,
    Wc*sw): the phases interleaved by views and one permute, the dynamic sizes read from `top`
    (sym_size), so no size of the example is written into the graph. Returns the last node and
    (node, val) for the nodes made (the caller sets them once `top` has its val)."""
    n, oc, hc, wc = shape
    sh, sw = stride
    made = []

    def size(d, v):                  # a dim of top: its int, or a sym_size node for a dynamic one
        if isinstance(v, int):
            return v
        node = gm.graph.call_function(aten.sym_size.int, (top, d))
        made.append((node, v))
        return node
    dims = [size(0, n), oc, size(2, hc), size(3, wc)]
    split = gm.graph.call_function(aten.view.default, (top, [dims[0], oc, sh, sw, dims[2], dims[3]]))
    moved = gm.graph.call_function(aten.permute.default, (split, [0, 1, 4, 2, 5, 3]))
    merged = gm.graph.call_function(aten.flatten.using_ints, (moved, 4, 5))
    shuffle = gm.graph.call_function(aten.flatten.using_ints, (merged, 2, 3))
    made += [(split, vx.new_empty((n, oc, sh, sw, hc, wc))), (moved, vx.new_empty((n, oc, hc, sh, wc, sw))),
             (merged, vx.new_empty((n, oc, hc, sh, wc * sw)))]
    return shuffle, made


def conv_transpose_as_conv(gm: GraphModule) -> bool:
    return finish(gm, replace_each(gm, {aten.conv_transpose2d.input}, _rewrite))


CONV_TRANSPOSE = {aten.conv_transpose1d.default, aten.conv_transpose2d.input, aten.conv_transpose3d.input}


def fold_batch_norm_into_grouped(gm: GraphModule) -> bool:
    """An eval batch_norm after a grouped transposed conv (1-, 2- or 3-D), folded into its
    weights and bias. vkq.quantize runs this before prepare_pt2e, whose own conv-bn fusion
    scales a transposed conv's weights (C, OC/g, k...) by all OC channels at once and fails for
    groups > 1 (torch.nn.utils.fusion.fuse_conv_bn_weights: "The size of tensor a ... must
    match")."""
    changed = False
    for bn in list(gm.graph.nodes):
        if not is_call(bn, {aten.batch_norm.default}) or bn.args[5]:        # training=True: not a fold
            continue
        conv = bn.args[0]
        groups = int(arg(conv, 6, "groups", 1)) if is_call(conv, CONV_TRANSPOSE) else 1
        if groups == 1 or len(conv.users) != 1:
            continue
        w, b = const_value(gm, conv.args[1]), const_value(gm, arg(conv, 2, "bias", None))
        gamma, beta, mean, var = (const_value(gm, a) for a in bn.args[1:5])
        if w is None or mean is None or var is None or (arg(conv, 2, "bias", None) is not None and b is None) \
                or (bn.args[1] is not None and gamma is None) or (bn.args[2] is not None and beta is None):
            continue
        oc = w.shape[1] * groups
        gamma = torch.ones(oc) if gamma is None else gamma.float()
        beta = torch.zeros(oc) if beta is None else beta.float()
        scale = gamma / torch.sqrt(var.float() + float(bn.args[7]))
        cg = w.shape[0] // groups       # input channel c feeds output channels (c // cg) * OC/g + j
        per_weight = scale.reshape(groups, 1, w.shape[1]).expand(groups, cg, w.shape[1]).reshape(w.shape[0], w.shape[1])
        new_w = w.float() * per_weight.reshape(*per_weight.shape, *[1] * (w.dim() - 2))
        new_b = ((torch.zeros(oc) if b is None else b.float()) - mean.float()) * scale + beta
        args = list(conv.args) + [None] * max(0, 3 - len(conv.args))
        args[1] = add_constant(gm, f"{conv.name}_bn_weight", new_w, conv)
        args[2] = add_constant(gm, f"{conv.name}_bn_bias", new_b, conv)
        conv.args = tuple(args)
        bn.replace_all_uses_with(conv)
        gm.graph.erase_node(bn)
        changed = True
    return finish(gm, changed)
