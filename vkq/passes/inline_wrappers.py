"""inline_wrappers: splice the bodies of export's context-manager wrappers into the graph.

    with torch.no_grad(): ...                 -> higher_order.wrap_with_set_grad_enabled(False, submod, *xs)
    with torch.autocast(..., enabled=False):  -> higher_order.wrap_with_autocast(cpu, dtype, False, ..., submod, *xs)

torch.export keeps such a block as a call of a higher-order op on a submodule (a get_attr of a
GraphModule, not of a tensor: the lowering would find no constant there). At inference in
float32 on the CPU neither wrapper changes a value (autocast only where it is enabled), so the
submodule's nodes take the wrapper's place and its getitems read them directly. A block that
autocasts for real is left alone (the lowering then says it cannot run it). Run before
quantizing (so PT2E annotates what is inside) and first in the lowering pipeline.
"""
from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node

from ._graph import finish

_hop = getattr(torch.ops, "higher_order", None)
SET_GRAD = getattr(_hop, "wrap_with_set_grad_enabled", None)
AUTOCAST = getattr(_hop, "wrap_with_autocast", None)


def _body(node: Node):
    """(submodule get_attr, operands) of a wrapper that changes no value, else None."""
    if SET_GRAD is not None and node.target is SET_GRAD:
        return node.args[1], node.args[2:]
    if AUTOCAST is not None and node.target is AUTOCAST and node.args[2] is False:
        return node.args[4], node.args[5:]
    return None


def _attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _inline(gm: GraphModule, node: Node, sub_node: Node, operands) -> None:
    sub = _attr(gm, sub_node.target)
    graph, env, outputs = gm.graph, {}, None
    placeholders = iter(operands)
    with graph.inserting_before(node):
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                env[n] = next(placeholders)
            elif n.op == "output":
                outputs = n.args[0]
            elif n.op == "get_attr":      # the body's own constants move to the parent
                name = f"{sub_node.target}_{n.target}".replace(".", "_")
                if not hasattr(gm, name):
                    value = _attr(sub, n.target)
                    if isinstance(value, torch.Tensor):
                        gm.register_buffer(name, value)
                    else:
                        setattr(gm, name, value)
                env[n] = graph.get_attr(name)
                env[n].meta.update(n.meta)
            else:
                env[n] = graph.node_copy(n, lambda a: env[a])
    outs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    for user in list(node.users):
        if user.target is operator.getitem:
            user.replace_all_uses_with(env[outs[user.args[1]]] if isinstance(outs[user.args[1]], Node)
                                       else outs[user.args[1]])
            graph.erase_node(user)
    if not node.users:
        graph.erase_node(node)


def inline_wrappers(gm: GraphModule) -> bool:
    changed, again = False, True
    while again:                  # a body may hold wrappers of its own
        again = False
        for node in list(gm.graph.nodes):
            body = _body(node) if node.op == "call_function" else None
            if body is None or not all(u.target is operator.getitem for u in node.users):
                continue
            _inline(gm, node, *body)
            changed = again = True
    return finish(gm, changed)
