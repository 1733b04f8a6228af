"""fuse_epilogue: fold what follows a conv2d_q8 or linear_q8 into its requantize epilogue (one
dispatch and one full write and read of the activation fewer per fusion).

    c = conv2d_q8(x, ...);  y = add_q8(c, r)  ->  y = conv2d_q8(x, ..., r; residual={add's attrs})

    c = conv2d_q8(x, ...);  y = lut_q8(c, table)  ->  y = conv2d_q8(x, ..., table; lut=True)
    c = linear_q8(x, ...);  y = lut_q8(c, table)  ->  y = linear_q8(x, ..., table; lut=True)

    c = linear_q8(x, ...);  y = dequantize(c)     ->  y = linear_q8(x, ...; dequant={scale, zp})  (float32)

when c has the add (the table, the dequantize) as its only reader (so nothing else needs c); the
table and the dequantize also through a view of c (a rank-5 linear's output viewed back: both
commute with it), y = view(fused). The fused op
computes exactly what the pair did (vkq/ops/conv.py, linear.py: its reference is the composition),
so nothing here is approximate. When both operands of an add are such convs, the first gets it.
A table after a folded add folds too (the epilogue applies the add, then the table): hardswish,
silu, sigmoid after a conv (every MobileNetV3, EfficientNet) and GELU after a transformer's FFN
linear cost no dispatch of their own, nor does a classifier's final dequantize.

Runs after fold_qdq_patterns (the vkq int8 ops exist) and before assign_layouts (the residual
operand must then be 4W4C like the conv's output).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ._graph import DEQUANTIZE, VIEWS, finish, is_call, is_vkq, q_args, set_val, shape_of, vkq_target


def _fusable_conv(node) -> bool:
    """A conv2d_q8 whose only reader is the op about to be folded in, with no table yet."""
    return is_vkq(node, "conv2d_q8") and len(node.users) == 1 and not node.kwargs.get("lut")


def _replace(gm: GraphModule, op_node: Node, conv: Node, extra: list, attrs: dict, op: str = "conv2d_q8") -> Node:
    """An `op` node like `conv` with `extra` inputs appended and `attrs` added, in place of op_node
    (at its position: the extra inputs exist there)."""
    with gm.graph.inserting_before(op_node):
        fused = gm.graph.call_function(vkq_target(op), tuple(conv.args) + tuple(extra),
                                       {**conv.kwargs, **attrs})
    fused.meta.update(op_node.meta)      # its value, qparams and PT2E source are the op's
    op_node.replace_all_uses_with(fused)
    return fused


def fuse_residual(gm: GraphModule, add: Node) -> bool:
    a, b = add.args[:2]
    for conv, other, which in ((a, b, "a"), (b, a, "b")):
        if _fusable_conv(conv) and not conv.kwargs.get("residual") and conv is not other:
            _replace(gm, add, conv, [other], {"residual": {"conv_input": which, **add.kwargs}})
            return True
    return False


def _viewed_linear(node: Node) -> Node | None:
    """The linear_q8 of which node is a view with no other reader (a rank-5 linear's output
    viewed back, fold_qdq_patterns._linear_over_rows), where that view is the linear's only
    reader: a table or a dequantize commutes with it."""
    if is_call(node, VIEWS) and len(node.users) == 1 and is_vkq(node.args[0], "linear_q8") \
            and len(node.args[0].users) == 1:
        return node.args[0]
    return None


def _fuse_through_view(gm: GraphModule, op_node: Node, view: Node, extra: list, attrs: dict, dtype) -> None:
    """op(view(linear)) -> view(linear with op fused): the fused linear where op_node stands
    (its inputs exist there), at the linear's shape and op_node's dtype, then the same view."""
    lin = view.args[0]
    with gm.graph.inserting_before(op_node):
        fused = gm.graph.call_function(vkq_target("linear_q8"), tuple(lin.args) + tuple(extra), {**lin.kwargs, **attrs})
        again = gm.graph.call_function(view.target, (fused, *view.args[1:]), dict(view.kwargs))
    fused.meta.update({k: v for k, v in op_node.meta.items() if k != "vkq_source"})   # (the view is PT2E's tensor)
    set_val(fused, shape_of(lin), dtype)
    again.meta.update(op_node.meta)
    op_node.replace_all_uses_with(again)


def fuse_table(gm: GraphModule, lut: Node) -> bool:
    src, table = lut.args[:2]
    if _fusable_conv(src):
        _replace(gm, lut, src, [table], {"lut": True}, "conv2d_q8")
        return True
    if is_vkq(src, "linear_q8") and len(src.users) == 1 and not src.kwargs.get("lut"):
        _replace(gm, lut, src, [table], {"lut": True}, "linear_q8")
        return True
    lin = _viewed_linear(src)
    if lin is not None and not lin.kwargs.get("lut"):
        _fuse_through_view(gm, lut, src, [table], {"lut": True}, torch.int8)
        return True
    return False


def fuse_dequantize(gm: GraphModule, deq: Node) -> bool:
    src, a = deq.args[0], q_args(deq)
    if a["dtype"] != torch.int8:
        return False
    attrs = {"dequant": {"scale": a["scale"], "zero_point": a["zero_point"]}}
    if is_vkq(src, "linear_q8") and len(src.users) == 1 and not src.kwargs.get("dequant"):
        _replace(gm, deq, src, [], attrs, "linear_q8")
        return True
    lin = _viewed_linear(src)
    if lin is not None and not lin.kwargs.get("dequant"):
        _fuse_through_view(gm, deq, src, [], attrs, torch.float32)
        return True
    return False


def fuse_epilogue(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):      # in graph order: an add before the table that follows it
        if is_vkq(node, "add_q8"):
            changed |= fuse_residual(gm, node)
        elif is_vkq(node, "lut_q8"):
            changed |= fuse_table(gm, node)
        elif is_call(node, DEQUANTIZE):     # after the table before it folded (graph order)
            changed |= fuse_dequantize(gm, node)
    return finish(gm, changed)
