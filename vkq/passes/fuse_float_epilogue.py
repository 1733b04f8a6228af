"""fuse_float_epilogue: fold the float op that follows a linear_dynamic into its epilogue (one
dispatch and one write and read of the linear's output fewer per fusion).

    y = linear_dynamic(x, ...);  z = silu(y)       ->  z = linear_dynamic(x, ...; epilogue="silu")
    y = linear_dynamic(x, ...);  z = add(r, y)     ->  z = linear_dynamic(x, ..., r; epilogue="add")
    y = linear_dynamic(x, ...);  z = mul(g, y)     ->  z = linear_dynamic(x, ..., g; epilogue="mul")

when y has that op as its only reader, and the other operand is a float32 tensor of y's shape
(no broadcast; add with alpha 1). A decoder layer's residual adds after its o_proj and down
linears, its MLP's silu(gate) after the gate linear and the product with up after the up linear
cost no dispatch of their own: four of a Llama layer's 26 in a decode step. The fused op computes
what the pair did, each float op rounded once (vkq/ops/linear.py, linear_store.glsl: its
reference is the composition; float add and multiply commute bit for bit, so the operand order
does not matter). The fused node stands where the op stood (the other operand exists there).

    n = rms_norm(x, [K], w, eps);  y_i = linear_dynamic(n, ...)  ->  y_i = linear_dynamic(x, ..., w; rms_norm={eps})

fuse_rms_norm: an RMS norm over the last dim with a constant weight whose every reader is a
linear_dynamic of it (a decoder layer's input and post-attention norms, read by q, k, v and by
gate, up) runs inside the linears' one row quantization (linear_rowq.comp NORM, its reference
the op rms_norm's bits): two dispatches a layer fewer, and no float tensor between.

Runs on the vkq ops, so after fold_qdq_patterns; after decompose_ops (the ops it reads are
final).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

import numpy as np

from ._graph import arg, aten, dtype_of, finish, is_call, is_vkq, shape_of, vkq_target

BINARY = {aten.add.Tensor: "add", aten.mul.Tensor: "mul"}


def _fusable(lin) -> bool:
    """A linear_dynamic with no epilogue yet whose only reader is the op about to be folded in."""
    return is_vkq(lin, "linear_dynamic") and len(lin.users) == 1 and not lin.kwargs.get("epilogue") \
        and dtype_of(lin) == torch.float32


def _fuse(gm: GraphModule, op_node: Node, lin: Node, epilogue: str, extra: list) -> None:
    with gm.graph.inserting_before(op_node):
        fused = gm.graph.call_function(vkq_target("linear_dynamic"), tuple(lin.args) + tuple(extra),
                                       {**lin.kwargs, "epilogue": epilogue})
    fused.meta.update(op_node.meta)      # its value and source are the op's
    op_node.replace_all_uses_with(fused)


def _binary_operands(node: Node):
    """(linear, other) of an add / mul that can take the linear's epilogue, or None."""
    if len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1 or not all(isinstance(a, Node) for a in node.args):
        return None
    a, b = node.args
    for lin, other in ((a, b), (b, a)):
        if _fusable(lin) and other is not lin and dtype_of(other) == torch.float32 \
                and tuple(shape_of(other)) == tuple(shape_of(lin)) == tuple(shape_of(node)):
            return lin, other
    return None


def fuse_float_epilogue(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):    # in graph order: silu(gate) folds before the product reads it
        if is_call(node, {aten.silu.default}) and len(node.args) == 1 and _fusable(node.args[0]):
            _fuse(gm, node, node.args[0], "silu", [])
            changed = True
        elif is_call(node, BINARY) and (pair := _binary_operands(node)) is not None:
            _fuse(gm, node, pair[0], BINARY[node.target], [pair[1]])
            changed = True
    return finish(gm, changed)


def fuse_rms_norm(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        if not is_call(node, {aten.rms_norm.default}) or dtype_of(node) != torch.float32:
            continue
        x, shape, w, eps = node.args[0], list(node.args[1]), arg(node, 2, "weight"), arg(node, 3, "eps")
        users = list(node.users)
        if not (isinstance(w, Node) and w.op == "get_attr" and len(shape) == 1 and shape == [shape_of(x)[-1]]) \
                or not users or any(not is_vkq(u, "linear_dynamic") or u.args[0] is not node or node in u.args[1:]
                                    or u.kwargs.get("rms_norm") for u in users):
            continue
        eps = float(np.finfo(np.float32).eps) if eps is None else float(eps)    # (torch's default, aten_float)
        for u in users:
            with gm.graph.inserting_before(u):
                fused = gm.graph.call_function(vkq_target("linear_dynamic"), (x,) + tuple(u.args[1:]) + (w,),
                                               {**u.kwargs, "rms_norm": {"eps": eps}})
            fused.meta.update(u.meta)
            u.replace_all_uses_with(fused)
            gm.graph.erase_node(u)
        changed = True
    return finish(gm, changed)
