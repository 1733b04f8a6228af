"""fuse_epilogue: fold what follows a conv2d_q8 or linear_q8 into its requantize epilogue (one
dispatch and one full write and read of the activation fewer per fusion).

    c = conv2d_q8(x, ...);  y = add_q8(c, r)  ->  y = conv2d_q8(x, ..., r; residual={add's attrs})

    c = conv2d_q8(x, ...);  y = lut_q8(c, table)  ->  y = conv2d_q8(x, ..., table; lut=True)
    c = linear_q8(x, ...);  y = lut_q8(c, table)  ->  y = linear_q8(x, ..., table; lut=True)

    c = linear_q8(x, ...);  y = dequantize(c)     ->  y = linear_q8(x, ...; dequant={scale, zp})  (float32)

when c has the add (the table, the dequantize) as its only reader (so nothing else needs c). The fused op
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

from ._graph import DEQUANTIZE, finish, is_call, is_vkq, q_args, vkq_target


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


def fuse_table(gm: GraphModule, lut: Node) -> bool:
    src, table = lut.args[:2]
    if _fusable_conv(src):
        _replace(gm, lut, src, [table], {"lut": True}, "conv2d_q8")
        return True
    if is_vkq(src, "linear_q8") and len(src.users) == 1 and not src.kwargs.get("lut"):
        _replace(gm, lut, src, [table], {"lut": True}, "linear_q8")
        return True
    return False


def fuse_dequantize(gm: GraphModule, deq: Node) -> bool:
    src, a = deq.args[0], q_args(deq)
    if is_vkq(src, "linear_q8") and len(src.users) == 1 and not src.kwargs.get("dequant") and a["dtype"] == torch.int8:
        _replace(gm, deq, src, [], {"dequant": {"scale": a["scale"], "zero_point": a["zero_point"]}}, "linear_q8")
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
