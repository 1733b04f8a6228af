"""fold_constants: what is computed from constants only is computed now, once.

fold_constant_computations, before the q/dq patterns are folded: a computation on constants
only (Swin-V2's position-bias MLP over its constant coordinate table, the table's gather and
sigmoid; a weight standardized on the fly; a position embedding resized) is its value, as PT2E
computes it (its quantize / dequantize pairs run as they do in PT2E's graph): without it each
call ran the MLP as int8 vkq ops, 96 of Swin-V2-T's 614 dispatches. The quantize and dequantize
nodes themselves, and views and gathers, are not folded on their own: dq(weight) -> view -> linear
is what fold_qdq_patterns takes as an int8 weight, so a constant stays int8 up to its op.

After fold_qdq_patterns has taken the int8 weights it can use, what is left on constants is
float work for CPU ops: a dequantize_per_channel of a weight feeding a float conv, a permute
of a parameter, ... Each such node becomes one get_attr buffer holding its value, so the
Program carries the float constant and the CPU op does not redo it on every call.
vkq op nodes and the q/dq of activations are not constant subgraphs and are left alone.

A tensor factory that takes a tensor only for its dtype, device or shape (`x.new_zeros(size)`,
`zeros_like(x)`, ...) is a constant too where that shape is static: Swin builds its
shifted-window attention mask from `x.new_zeros(...)`, which was its one CPU node.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ._graph import GATHERS, PERMUTES, VIEWS, add_constant, const_value, dynamic_size, finish, is_vkq, op_name, \
    set_val

# value from the arguments alone; a tensor argument gives only dtype, device or shape
FACTORIES = {"aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.zeros_like", "aten.ones_like",
             "aten.full_like"}


def _static(node: Node) -> bool:
    """node's value is a tensor of static shape (not symbolic, nor dynamic in a dynamic lowering)."""
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape) and not dynamic_size(node)


def _stand_in(node: Node) -> torch.Tensor:
    """An uninitialised tensor of node's static shape and dtype: all a factory reads of it."""
    val = node.meta["val"]
    return torch.empty(tuple(val.shape), dtype=val.dtype)


def _is_factory(node: Node) -> bool:
    return (node.op == "call_function" and op_name(node.target) in FACTORIES
            and all(_static(a) for a in node.all_input_nodes))


def _random(node: Node) -> bool:
    """rand / randn / dropout in training mode...: no constant however constant its inputs."""
    return isinstance(node.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in node.target.tags


def _is_foldable(node: Node) -> bool:
    return (node.op == "call_function" and not is_vkq(node) and node.users and _static(node) and not _random(node)
            and (_is_factory(node) or all(a.op == "get_attr" for a in node.all_input_nodes)))


_NOT_ALONE = VIEWS | PERMUTES | GATHERS      # (and the quantized_decomposed ops): see the docstring


def fold_constant_computations(gm: GraphModule) -> bool:
    """Each computation on constants only (not a q/dq, view or gather on its own) -> a constant
    holding its value (the module docstring says why). One walk in graph order."""
    constant = set()                         # nodes whose value follows from constants only
    changed = False
    for node in list(gm.graph.nodes):
        if node.op == "get_attr":
            constant.add(node)
            continue
        if node.op != "call_function" or _random(node) or is_vkq(node) \
                or not all(a in constant for a in node.all_input_nodes):
            continue
        constant.add(node)
        if (not node.all_input_nodes or node.target in _NOT_ALONE or not _static(node) or not node.users
                or getattr(node.target, "namespace", None) == "quantized_decomposed"):
            continue
        const = _replace_by_value(gm, node)
        if const is not None:
            constant.add(const)
            changed = True
    return finish(gm, changed)


def _replace_by_value(gm: GraphModule, node) -> Node | None:
    """node's uses -> a get_attr of its value (returned), or None where it has no constant value."""
    value = evaluate_constant(gm, node)
    if value is None:
        return None
    const = add_constant(gm, node.name, value, node)
    set_val(const, value.shape, value.dtype)
    node.replace_all_uses_with(const)
    return const


def evaluate_constant(gm: GraphModule, node):
    """The value of node if it is a constant tensor (a get_attr, or a call on constants only),
    else None."""
    out = _evaluate(gm, node, 0)
    return out if isinstance(out, torch.Tensor) else None


def _is_value(v) -> bool:
    """A tensor, or a tuple/list of tensors (chunk, split: read through getitem)."""
    return isinstance(v, torch.Tensor) or (isinstance(v, (tuple, list)) and len(v) > 0
                                           and all(isinstance(t, torch.Tensor) for t in v))


def _evaluate(gm: GraphModule, node, depth: int):
    if not isinstance(node, Node):
        return None
    if node.op == "get_attr":
        return const_value(gm, node)
    if node.op != "call_function" or is_vkq(node) or depth > 50:
        return None
    factory = _is_factory(node)
    env = {}
    for a in node.all_input_nodes:
        v = _stand_in(a) if factory else _evaluate(gm, a, depth + 1)
        if v is None:
            return None
        env[a] = v
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    # a view as a reshape: a constant's stored strides need not be those the graph was traced
    # with (a permute of a tensor that was non-contiguous then, of a contiguous constant now)
    target = torch.ops.aten.reshape.default if node.target in _STRIDED_VIEWS else node.target
    with torch.no_grad():
        out = target(*args, **kwargs)
    return out if _is_value(out) else None


_STRIDED_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)


def fold_constants(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        if _is_foldable(node) and _replace_by_value(gm, node) is not None:
            changed = True
    return finish(gm, changed)
