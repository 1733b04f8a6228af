"""views_to_repack: a view / reshape / flatten / squeeze / unsqueeze of an int8 tensor becomes a
`repack` with the output shape (a row-major reshape of the packed tensor). A repack of a
repack that nothing else reads is merged into one: flatten(view(x)) is one copy.
assign_layouts later decides the layout each repack writes."""
from __future__ import annotations

import torch
from torch.fx import GraphModule

from ._graph import SHAPE_OF, VIEWS, dtype_of, finish, is_call, is_vkq, qparams, set_val, shape_of, vkq_target


def views_to_repack(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        if not (is_call(node, VIEWS) and dtype_of(node) == torch.int8):
            continue
        src = node.args[0]
        if is_vkq(src, "repack") and len(src.users) == 1:
            src = src.args[0]                       # merge with the repack before
        shape = list(shape_of(node))
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(vkq_target("repack"), (src,), {"shape": shape})
        set_val(new, shape, torch.int8)
        if "vkq_source" in node.meta:
            new.meta["vkq_source"] = node.meta["vkq_source"]
        if SHAPE_OF in node.meta:       # a view lift_quantize made: the exported node of its shape
            new.meta[SHAPE_OF] = node.meta[SHAPE_OF]
        qp = qparams(node)
        if qp is not None:
            new.meta["vkq_qparams"] = qp
        node.replace_all_uses_with(new)
        changed = True
    return finish(gm, changed)
