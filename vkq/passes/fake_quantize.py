"""fake_quantize: dequantize(quantize(x)) of a float x, where the dequantize is the quantize's
only reader -> vkq fake_quantize(x) (vkq/ops/io.py): one float pass instead of a packed int8
tensor written and read back. What is left of such pairs after folding sits between float ops:
a static attention's scores (matmul -> q/dq -> bias add -> q/dq -> softmax). Exact: the op
computes both steps as the two kernels do.
Views and permutes between the two (each read only by the next: Swin's shifted windows view
the scores to (B, windows, heads, N, N) to add their mask and back) move to the float side:
dequantize(views(quantize(x))) == views(fake_quantize(x)), a float reshape costs nothing (the
executor aliases it) and an int8 one a quantize, a repack and a dequantize. A pair on a
constant (that mask) is computed now, once, as the op would (fold_constants then folds the views).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule

from ._graph import DEQUANTIZE, PERMUTES, QUANTIZE, VIEWS, add_constant, dtype_of, finish, is_call, q_args, \
    set_val, shape_of, val, vkq_target
from .fold_constants import evaluate_constant


def _through_views(dq):
    """(the node under dq's chain of views / permutes, each read only by the next; the chain
    from that node down)."""
    chain, n = [], dq.args[0]
    while is_call(n, VIEWS | PERMUTES) and len(n.users) == 1:
        chain.append(n)
        n = n.args[0]
    return n, chain[::-1]


def fake_quantize(gm: GraphModule) -> bool:
    changed = False
    for dq in list(gm.graph.nodes):
        if not is_call(dq, DEQUANTIZE):
            continue
        q, views = _through_views(dq)
        if not is_call(q, QUANTIZE) or len(q.users) != 1 or dtype_of(q.args[0]) != torch.float32 \
                or dtype_of(dq) != torch.float32:
            continue
        a, b = q_args(q), q_args(dq)
        if a["dtype"] != torch.int8 or (a["scale"], a["zero_point"]) != (b["scale"], b["zero_point"]):
            continue
        params = {"scale": float(a["scale"]), "zero_point": int(a["zero_point"]), "qmin": int(a["qmin"]),
                  "qmax": int(a["qmax"])}
        c = evaluate_constant(gm, q.args[0])      # (a constant subgraph: Swin's mask from new_zeros)
        if c is not None:     # the op's own reference (vkq_target runs it): the same bits, computed once
            fq = add_constant(gm, "fake_quantized", vkq_target("fake_quantize")(c, **params), before=q)
        else:
            with gm.graph.inserting_before(q):
                fq = gm.graph.call_function(vkq_target("fake_quantize"), (q.args[0],), params)
            set_val(fq, shape_of(q), torch.float32)
        q.replace_all_uses_with(fq)
        for v in views:                      # now views of a float tensor: no longer an int8 quantize's value
            v.meta["val"] = val(v).to(torch.float32)
            v.meta.pop("vkq_source", None)
        if views:                            # the last one holds what dq held (PT2E's tensor, for compare)
            views[-1].meta["vkq_source"] = dq.meta.get("vkq_source", dq.name)
        dq.replace_all_uses_with(dq.args[0])
        gm.graph.erase_node(dq)
        gm.graph.erase_node(q)
        changed = True
    return finish(gm, changed)
