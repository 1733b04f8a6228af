"""one_d_as_two_d: 1-D convolutions and pools as their 2-D forms, so that they get int8 kernels.

The quantizer runs this before annotating (VkqQuantizer.transform_for_annotation; prepare_pt2e
has already folded each BatchNorm1d into its conv1d):

  conv1d(x, w, b, s, p, d, g)            -> squeeze(conv2d(unsqueeze(x, 2), w[:, :, None], b,
                                                           [1, s], [0, p], [1, d], g), 2)
  conv_transpose1d                       -> conv_transpose2d the same way (stride (1, s)), which
                                            conv_transpose_as_conv then makes a conv
  max_pool1d / avg_pool1d / adaptive_avg_pool1d -> the 2-D pool over a (1, k) window, the same way
  adaptive_max_pool1d(x, L) + getitem 0  -> vkq.adaptive_max_pool2d(x, [1, L]) the same way (a text
                                            CNN's max over time: L = 1, any input length)
  upsample_linear1d / nearest1d / nearest-exact1d -> the 2-D resize to (1, Lo) the same way (a
                                            vocoder's or a 1-D U-Net's upsampling)

x (N, C, L) is viewed as (N, C, 1, L): the length runs along W, which the 4W4C blocks pack four
positions at a time (L along H, as (N, C, L, 1), would leave three of every four words empty).
Then the views between two such ops go: a squeeze followed by elementwise ops (relu, an add of
two squeezed tensors, ...) moves after them, and unsqueeze(squeeze(t, 2), 2) is t. A stack of
1-D layers thus stays 4-D from its first conv to its last, as a 2-D network does; the views
left at its ends become repacks. Only batched (N, C, L) inputs are rewritten.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ._graph import (add_constant, arg, aten, call_before, const_value, finish, first_outputs, is_call, replace_each,
                     unary_operand, val)

POOLS_1D = {aten.max_pool1d.default, aten.avg_pool1d.default, aten.adaptive_avg_pool1d.default,
            aten.adaptive_max_pool1d.default}
RESIZES_1D = {**{getattr(aten.upsample_linear1d, o): "linear" for o in ("vec", "default")},
              **{getattr(aten.upsample_nearest1d, o): "nearest" for o in ("vec", "default")},
              **{getattr(aten._upsample_nearest_exact1d, o): "exact" for o in ("vec", "default")}}
RESIZES_2D = {"linear": {True: aten.upsample_bilinear2d.vec, False: aten.upsample_bilinear2d.default},
              "nearest": {True: aten.upsample_nearest2d.vec, False: aten.upsample_nearest2d.default},
              "exact": {True: aten._upsample_nearest_exact2d.vec, False: aten._upsample_nearest_exact2d.default}}
CONV_1D = {aten.conv1d.default, aten.conv1d.padding}
CONV_T_1D = {aten.conv_transpose1d.default}
# elementwise ops a squeeze moves past (besides unary_operand's): activations, and binary ops
# whose tensor operands are all squeezes of equal 4-D shapes
ACTIVATIONS = {aten.relu.default, aten.relu6.default, aten.hardtanh.default, aten.dropout.default,
               aten.clone.default}
BINARY = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.maximum.default,
          aten.minimum.default}


def _one(v, default):
    """A 1-D op's int-or-list argument as one int ([] means default, as for max_pool1d's stride)."""
    if isinstance(v, (list, tuple)):
        return int(v[0]) if len(v) else default
    return int(v) if v is not None else default


def _call(gm: GraphModule, before: Node, target, args, value) -> Node:
    with gm.graph.inserting_before(before):
        n = gm.graph.call_function(target, tuple(args))
    if value is not None:
        n.meta["val"] = value
    return n


def _three_d(node) -> bool:
    v = val(node)
    return isinstance(v, torch.Tensor) and v.dim() == 3 and v.dtype.is_floating_point


def pool_args_2d(node: Node) -> tuple:
    """(the 2-D pool, its arguments after x) for max_pool1d / avg_pool1d `node`: the window
    (1, k), stride (1, s), padding (0, p) (and dilation (1, d), ceil_mode / count_include_pad),
    as the op over (N, C, 1, L) or over (N, C, L) seen as (C, H, W) planes computes it."""
    k = _one(node.args[1], 1)
    window = ([1, k], [1, _one(arg(node, 2, "stride", []), k)], [0, _one(arg(node, 3, "padding", 0), 0)])
    if node.target == aten.max_pool1d.default:
        return aten.max_pool2d.default, (*window, [1, _one(arg(node, 4, "dilation", 1), 1)],
                                         bool(arg(node, 5, "ceil_mode", False)))
    return aten.avg_pool2d.default, (*window, bool(arg(node, 4, "ceil_mode", False)),
                                     bool(arg(node, 5, "count_include_pad", True)))


def _as_two_d(gm: GraphModule, node: Node) -> Node | None:
    """The 2-D op (between an unsqueeze and a squeeze) that replaces 1-D `node`, or None."""
    x = node.args[0]
    if node.target == aten.adaptive_max_pool1d.default:
        return _adaptive_max_as_two_d(gm, node)
    if not (_three_d(x) and _three_d(node)):
        return None
    out_val = val(node).unsqueeze(2)
    x4 = _call(gm, node, aten.unsqueeze.default, (x, 2), val(x).unsqueeze(2))
    if is_call(node, CONV_1D | CONV_T_1D):
        w = const_value(gm, node.args[1])
        if w is None or w.dim() != 3:
            gm.graph.erase_node(x4)
            return None
        w4 = add_constant(gm, f"{node.name}_weight", w.unsqueeze(2), node)
    if is_call(node, CONV_T_1D):     # (then conv_transpose_as_conv makes it a conv)
        args = (x4, w4, arg(node, 2, "bias", None), [1, _one(arg(node, 3, "stride", 1), 1)],
                [0, _one(arg(node, 4, "padding", 0), 0)], [0, _one(arg(node, 5, "output_padding", 0), 0)],
                int(arg(node, 6, "groups", 1)), [1, _one(arg(node, 7, "dilation", 1), 1)])
        target = aten.conv_transpose2d.input
    elif is_call(node, CONV_1D):
        padding = arg(node, 4, "padding", 0)
        padding = padding if isinstance(padding, str) else [0, _one(padding, 0)]
        target = aten.conv2d.padding if isinstance(padding, str) else aten.conv2d.default
        args = (x4, w4, arg(node, 2, "bias", None), [1, _one(arg(node, 3, "stride", 1), 1)], padding,
                [1, _one(arg(node, 5, "dilation", 1), 1)], int(arg(node, 6, "groups", 1)))
    elif node.target in (aten.max_pool1d.default, aten.avg_pool1d.default):
        target, rest = pool_args_2d(node)
        args = (x4, *rest)
    else:
        args, target = (x4, [1, _one(node.args[1], 1)]), aten.adaptive_avg_pool2d.default
    two = _call(gm, node, target, args, out_val)
    two.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    return _call(gm, node, aten.squeeze.dim, (two, 2), val(node))


def _adaptive_max_as_two_d(gm: GraphModule, node: Node) -> Node | None:
    """adaptive_max_pool1d(x, L) + getitem 0 (its values; the indices unused) ->
    squeeze(vkq.adaptive_max_pool2d(unsqueeze(x, 2), [1, L]), 2), the getitems replaced."""
    from .torch_ops import ADAPTIVE_MAX_POOL2D
    x = node.args[0]
    if not _three_d(x) or (users := first_outputs(node)) is None or not _three_d(users[0]):
        return None
    x4 = _call(gm, node, aten.unsqueeze.default, (x, 2), val(x).unsqueeze(2))
    two = _call(gm, node, ADAPTIVE_MAX_POOL2D, (x4, [1, _one(node.args[1], 1)]), val(users[0]).unsqueeze(2))
    two.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    out = _call(gm, node, aten.squeeze.dim, (two, 2), val(users[0]))
    for u in users:
        u.replace_all_uses_with(out)
        gm.graph.erase_node(u)
    return out


def _squeezed(node) -> Node | None:
    """t where node = squeeze(t, 2), t 4-D with a dim 2 of 1; else None."""
    if not is_call(node, {aten.squeeze.dim}) or node.args[1] not in (2, -2):
        return None
    t = node.args[0]
    v = val(t)
    return t if isinstance(v, torch.Tensor) and v.dim() == 4 and str(v.shape[2]) == "1" else None


def _dims(node) -> tuple:
    """A node's shape as text: equal for equal symbolic sizes, without a guard on them."""
    return tuple(str(d) for d in val(node).shape)


def _sink(gm: GraphModule, e: Node) -> bool:
    """e(squeeze(t, 2), ...) -> squeeze(e(t, ...), 2) for an elementwise e whose tensor operands
    are all such squeezes of one 4-D shape."""
    tensors = [a for a in list(e.args) + list(e.kwargs.values()) if isinstance(a, Node)]
    if not tensors or not (is_call(e, ACTIVATIONS) or unary_operand(e) is not None or is_call(e, BINARY)):
        return False
    inner = [_squeezed(a) for a in tensors]
    if any(t is None for t in inner) or len({_dims(t) for t in inner}) != 1 or not _three_d(e):
        return False
    if any(isinstance(a, (list, tuple)) for a in e.args) or _dims(e) != _dims(tensors[0]):
        return False      # (broadcasting or list arguments: leave it)
    swap = dict(zip(tensors, inner))
    with gm.graph.inserting_before(e):
        e4 = gm.graph.call_function(e.target, tuple(swap.get(a, a) for a in e.args),
                                    {k: swap.get(v, v) for k, v in e.kwargs.items()})
    e4.meta.update({k: v for k, v in e.meta.items() if k != "val"})
    e4.meta["val"] = val(e).unsqueeze(2)
    out = _call(gm, e, aten.squeeze.dim, (e4, 2), val(e))
    e.replace_all_uses_with(out)
    gm.graph.erase_node(e)
    return True


def _resize_as_two_d(gm: GraphModule, node: Node) -> Node | None:
    """upsample_linear1d / nearest1d / nearest-exact1d of (N, C, L): the 2-D resize of
    (N, C, 1, L) to (1, Lo), its scale (when given) along W. Height 1 to 1 is the identity in
    ATen's bilinear and nearest maps, so the values are the 1-D op's."""
    x = node.args[0]
    if not _three_d(x):
        return None
    kind, vec = RESIZES_1D[node.target], node.target._overloadname == "vec"
    a = list(node.args) + [None] * 4
    size, scale = (a[1], a[3 if kind == "linear" else 2])
    if vec:
        size, scale = (None if size is None else [1, *size]), (None if scale is None else [1.0, *scale])
        args = (size, a[2], scale) if kind == "linear" else (size, scale)
    else:
        args = ([1, *size], a[2], None, scale) if kind == "linear" else ([1, *size], None, scale)
    two = call_before(node, aten.unsqueeze.default, (x, 2))
    return call_before(node, aten.squeeze.dim, (call_before(node, RESIZES_2D[kind][vec], (two, *args)), 2))


def one_d_as_two_d(gm: GraphModule, targets=CONV_1D | CONV_T_1D | POOLS_1D) -> bool:
    """targets: the 1-D ops to rewrite (the float-conv schemes rewrite only conv_transpose1d,
    which has a Vulkan path only as conv_transpose_as_conv's 2-D conv)."""
    rewrote = replace_each(gm, set(RESIZES_1D), _resize_as_two_d)
    if not replace_each(gm, targets, _as_two_d) and not rewrote:
        return False
    moved = True
    while moved:               # squeezes down past elementwise ops, then unsqueeze(squeeze(t)) -> t
        moved = False
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and any(_squeezed(a) is not None for a in node.all_input_nodes):
                moved |= _sink(gm, node)
        for node in list(gm.graph.nodes):
            if is_call(node, {aten.unsqueeze.default}) and node.args[1] in (2, -2) \
                    and _squeezed(node.args[0]) is not None:
                node.replace_all_uses_with(_squeezed(node.args[0]))
                gm.graph.erase_node(node)
                moved = True
    return finish(gm, True)
