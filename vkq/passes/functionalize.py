"""In-place aten ops -> functional ones, writes through views included.

torch.export's graph keeps in-place ops (relu_, add_, copy_, fill_, ...). A tensor written as a
whole has every later use pointed at the in-place node's output, so the functional op simply
takes the node's place. A write through a view is another matter: after `y[:, 1:] = v` (slice +
copy_) or `y[..., :2].sigmoid_()` the graph's later readers still read the base y, and the
functional result alone would be dead code: the write lost, silently. Such a write becomes the
functional op on the view's value, then that value written back into the view's parent (the
parent's pieces either side of a slice and the value, concatenated; an inverse permute; a
reshape), through every view between the written one and its base; every use after the write
of the base, or of a view of it taken before the write, then reads the new base (the view taken
again from it); a base that is a constant (a mask or table built in forward by writes into a
zeros(): Swin's shifted-window masks, ConViT's relative positions) is its value once written.
What cannot be written back (a view op without a rule here) is refused with its name rather
than computed wrong.

A write into one of the module's buffers (a static KV cache's index_copy_ at cache_position, a
step counter's add_) is program state: it outlives the call. The buffer's value after the last
write becomes an extra output of the graph, and gm.meta[STATE] names the buffers those trailing
outputs update, in order; the lowering makes each such buffer a state tensor of the Program
(vkq.lower.lift_state) and the executors keep its value between calls.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ._graph import add_constant, call_before, val
from .fold_constants import evaluate_constant

aten = torch.ops.aten
STATE = "vkq_state"     # gm.meta: the buffers the graph's trailing outputs update, in order
END = 9223372036854775807       # a slice's "to the end", as export writes it

# views whose value is the parent's elements in another shape: written back by a reshape
SHAPE_VIEWS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.unsqueeze.default,
               aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.flatten.using_ints,
               aten.unflatten.int, aten.alias.default, aten.detach.default, aten.contiguous.default}
MAYBE_COPIES = {aten.reshape.default, aten.contiguous.default}   # a view where the operand's strides allow


def functional_target(target):
    """The functional twin of an in-place aten op (hardswish_ -> hardswish, add_.Tensor ->
    add.Tensor, copy_ -> copy), or None: any op whose schema writes its first argument and whose
    name without the trailing underscore has the same overload."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return None
    name = target._opname
    first = target._schema.arguments[0] if target._schema.arguments else None
    if not name.endswith("_") or name.startswith("_") or first is None or first.alias_info is None \
            or not first.alias_info.is_write:
        return None
    packet = getattr(aten, name[:-1], None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


def _is_view(node) -> bool:
    """Whether node's value is a view of its first operand (shares its storage): an aten op
    whose schema says its one output aliases. (A split's views, a list, cannot be written in
    place: torch refuses that itself.)"""
    t = node.target if isinstance(node, Node) and node.op == "call_function" else None
    if not isinstance(t, torch._ops.OpOverload) or len(t._schema.returns) != 1:
        return False
    alias = t._schema.returns[0].alias_info
    if alias is None or alias.is_write or str(t._schema.returns[0].type) != "Tensor":
        return False
    return t not in MAYBE_COPIES or _aliases(node)


def _aliases(node: Node) -> bool:
    """Whether a reshape or contiguous returned a view of its operand (its strides allow one)
    rather than a copy, by the operand's recorded strides."""
    v, out = val(node.args[0]), val(node)
    if not isinstance(v, torch.Tensor) or not isinstance(out, torch.Tensor):
        return True
    if node.target is aten.contiguous.default:
        return v.is_contiguous()
    try:
        torch.empty_strided(tuple(v.shape), v.stride(), device="meta").view(tuple(out.shape))
        return True
    except RuntimeError:
        return False


def _size(node: Node, dim: int):
    return val(node).shape[dim]


def slice_write(at: Node, base: Node, new: Node, dim: int, start, end, step) -> Node:
    """base with `new` in base[dim: start:end:step]: with step 1 and a static size, the pieces of
    base either side and new, concatenated (ops vkq runs on int8); a slice_scatter elsewhere."""
    size, rank = _size(base, dim), val(base).dim()
    dim = dim % rank
    if step == 1 and isinstance(size, int):
        start = 0 if start is None else (start + size if start < 0 else start)
        end = size if end is None or end >= size else (end + size if end < 0 else end)
        start, end = min(max(start, 0), size), min(max(end, start), size)
        pieces = ([call_before(at, aten.slice.Tensor, (base, dim, 0, start))] if start > 0 else []) + [new] \
            + ([call_before(at, aten.slice.Tensor, (base, dim, end, END))] if end < size else [])
        return pieces[0] if len(pieces) == 1 else call_before(at, aten.cat.default, (pieces, dim))
    return call_before(at, aten.slice_scatter.default, (base, new, dim, start, end, step))


def _write_back(view: Node, new: Node, at: Node) -> Node:
    """The view's parent with `new` (the view's new value) written where the view shows it."""
    parent, t, a = view.args[0], view.target, view.args
    if t in SHAPE_VIEWS:            # (reshape_as: normalize_ops makes it a reshape where the shape is static)
        return call_before(at, aten.reshape_as.default, (new, parent))
    if t is aten.permute.default:
        dims = [d % len(a[1]) for d in a[1]]
        return call_before(at, aten.permute.default, (new, sorted(range(len(dims)), key=dims.__getitem__)))
    if t is aten.transpose.int:
        return call_before(at, aten.transpose.int, (new, a[1], a[2]))
    if t is aten.t.default:
        return call_before(at, aten.t.default, (new,))
    if t is aten.slice.Tensor:
        dim, start, end, step = (list(a[1:]) + [0, None, None, 1][len(a) - 1:])[:4]
        return slice_write(at, parent, new, dim, start, end, step)
    if t is aten.select.int:
        dim, index, size = a[1], a[2], _size(parent, a[1])
        if not isinstance(size, int):
            return call_before(at, aten.select_scatter.default, (parent, new, dim, index))
        index = index + size if index < 0 else index
        return slice_write(at, parent, call_before(at, aten.unsqueeze.default, (new, dim)), dim, index, index + 1, 1)
    if t is aten.diagonal.default:
        return call_before(at, aten.diagonal_scatter.default, (parent, new, *a[1:]))
    if t is aten.as_strided.default:
        return call_before(at, aten.as_strided_scatter.default, (parent, new, *a[1:]))
    raise NotImplementedError(f"an in-place write through {view.name}, a view made by {t}: vkq cannot "
                              "write it back into its base (rewrite the model's write without it)")


def _taken_again(view: Node, base: Node, new_base: Node, at: Node) -> Node:
    """view's chain of views from base taken again from new_base."""
    chain = []
    while view is not base:
        chain.append(view)
        view = view.args[0]
    out = new_base
    for v in reversed(chain):
        out = call_before(at, v.target, (out, *v.args[1:]), v.kwargs)
    return out


def _functionalize(gm: GraphModule, node: Node, target, written: dict, final: dict) -> None:
    """One in-place node -> its functional op, written back through the views it writes through;
    the reads after it of what it wrote read the new values. written: {node: the module buffer
    whose value it is, after writes}, and final: {buffer: its last value}, updated here (a
    buffer's writes: program state)."""
    chain, base = [], node.args[0]
    while _is_view(base):
        chain.append(base)
        base = base.args[0]
    new = call_before(node, target, node.args, node.kwargs)
    new_base = new
    for view in chain:                  # innermost first
        new_base = _write_back(view, new_base, node)
    buffer = written.get(base) or (base.target if base.op == "get_attr" and _is_buffer(gm, base.target) else None)
    if buffer is not None:      # (never folded to a constant: its value changes from call to call)
        written[new_base], final[buffer] = buffer, new_base
    elif chain and (value := evaluate_constant(gm, new_base)) is not None:
        new_base = add_constant(gm, f"{base.name}_written", value, node)    # a table built by writes: its value
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    here = order[node]
    # the base's views taken before the write (they share its storage: a read after it sees it)
    views, frontier = [], [base]
    while frontier:
        n = frontier.pop()
        views += (taken := [u for u in n.users if order[u] < here and _is_view(u) and u.args[0] is n])
        frontier += taken
    for v in views:
        later = [u for u in v.users if order.get(u, -1) > here]
        if later:
            again = _taken_again(v, base, new_base, node)
            for u in later:
                u.replace_input_with(v, again)
    for u in [u for u in base.users if order.get(u, -1) > here]:
        u.replace_input_with(base, new_base)
    node.replace_all_uses_with(new)
    gm.graph.erase_node(node)


def functionalize_inplace(gm: GraphModule) -> bool:
    """Every in-place aten op -> its functional form (this module's docstring). Run by the
    quantizer before annotating too, so that PT2E's reference graph computes the writes."""
    changed, written, final = False, {}, {}
    for node in list(gm.graph.nodes):
        target = functional_target(node.target) if node.op == "call_function" else None
        if target is not None:
            _functionalize(gm, node, target, written, final)
            changed = True
    if final:
        _output_state(gm, final)
    if changed:
        gm.recompile()
    return changed


# buffers that are not the model's own: vkq's constants (add_constant) and what torch.export
# lifted out of forward (a tensor built there is the call's own, not state: writes into it do
# not outlive the call)
NOT_STATE = ("_vkq", "_tensor_constant", "lifted_tensor", "_frozen_param", "_scale_", "_zero_point_")


def _is_buffer(gm: GraphModule, target: str) -> bool:
    """Whether target is one of the model's own buffers (state, where forward writes it)."""
    return target in dict(gm.named_buffers()) and not target.rsplit(".", 1)[-1].startswith(NOT_STATE)


def _output_state(gm: GraphModule, final: dict) -> None:
    """The written buffers' last values as trailing outputs of the graph (gm.meta[STATE] names
    them); a pytree output spec (torch.export's) becomes (the model's outputs, *states)."""
    import torch.utils._pytree as pytree
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    flat = list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
    names = [b for b in final if b not in gm.meta.get(STATE, [])]
    out.args = (tuple(flat + [final[b] for b in names]),)
    codegen = gm.graph._codegen
    info = getattr(codegen, "pytree_info", None)
    if info is not None and info.out_spec is not None:
        model_out = pytree.tree_unflatten([0] * info.out_spec.num_leaves, info.out_spec)
        spec = pytree.tree_structure((model_out, *[0] * len(names)))
        codegen.pytree_info = info._replace(out_spec=spec)
    gm.meta[STATE] = list(gm.meta.get(STATE, [])) + names
