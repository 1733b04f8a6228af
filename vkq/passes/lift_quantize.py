"""lift_quantize: move each quantize above the view/reshape/permute chain that feeds it, and
merge quantizes of one tensor with equal parameters (after seed 002, LiftCombineQuantPass).

    q = quantize(flatten(avg_pool(...)))   ->   q = flatten(quantize(avg_pool(...)))

Why: the op that produced the float tensor then sits right before its quantize
(dq -> avg_pool -> q folds into avg_pool2d_q8), and the view runs on int8 (a repack, or
nothing at all). Views are pure re-indexing, so quantizing before or after them is the same.
A view with other users stays where it is (its float value is still needed).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ._graph import GATHERS, PERMUTES, QUANTIZE, SHAPE_OF, VIEWS, finish, is_call, picks_by_constant, set_val, \
    shape_of

SWAPPABLE = VIEWS | PERMUTES | GATHERS


def _chain(q: Node) -> tuple[Node, list[Node]]:
    """(the tensor before the views, the views from nearest to q outwards)."""
    chain, current = [], q.args[0]
    while (is_call(current, SWAPPABLE) or picks_by_constant(current)) and len(current.users) == 1:
        chain.append(current)
        current = current.args[0]
    return current, chain


def _key(target, first, rest, kwargs):
    return (target, first, repr(rest), repr(sorted(kwargs.items())))


def lift_quantize(gm: GraphModule) -> bool:
    graph = gm.graph
    changed = False
    cache: dict = {}
    for q in list(graph.nodes):
        if not is_call(q, QUANTIZE) or not isinstance(q.args[0], torch.fx.Node):
            continue
        source, chain = _chain(q)
        key = _key(q.target, source, q.args[1:], q.kwargs)
        if not chain and key not in cache:
            cache[key] = q
            continue
        lifted = cache.get(key)
        if lifted is None:
            with graph.inserting_after(source):
                lifted = graph.call_function(q.target, (source, *q.args[1:]), dict(q.kwargs))
            lifted.meta.update(q.meta)
            lifted.meta.pop("vkq_source", None)     # quantizes another tensor than q did
            lifted.meta[SHAPE_OF] = source.meta.get(SHAPE_OF, source.name)
            set_val(lifted, shape_of(source), torch.int8)
            cache[key] = lifted
        final = lifted
        for view in reversed(chain):
            vkey = _key(view.target, final, view.args[1:], view.kwargs)
            if vkey in cache:
                final = cache[vkey]
                continue
            # where the float view was: after its other arguments (a dynamic size's sym_size)
            with graph.inserting_before(view):
                new = graph.call_function(view.target, (final, *view.args[1:]), dict(view.kwargs))
            new.meta.update(view.meta)
            new.meta[SHAPE_OF] = view.meta.get(SHAPE_OF, view.name)
            set_val(new, shape_of(view), torch.int8)
            cache[vkey] = final = new
        if final is not q:
            if "vkq_source" in q.meta and final is not lifted:
                final.meta.setdefault("vkq_source", q.meta["vkq_source"])
            q.replace_all_uses_with(final)
            changed = True
    return finish(gm, changed)
