"""drop_cancelling_qdq: quantize(dequantize(x)) with the same scale, zero point and dtype, and a
range no narrower than x's, is x itself. Dropping the pair keeps the tensor int8 from one
Vulkan op to the next (PT2E puts a dq/q pair on every edge).

A pair with other parameters, or a narrower range (a fused relu), is not an identity: it stays,
and fold_qdq_patterns turns it into a clamp_q8 (integer rescale and clamp).
"""
from __future__ import annotations

from torch.fx import GraphModule

from ._graph import DEQUANTIZE, QUANTIZE, finish, is_call, q_args


def cancels(q, dq) -> bool:
    a, b = q_args(q), q_args(dq)
    return (a["scale"] == b["scale"] and a["zero_point"] == b["zero_point"] and a["dtype"] == b["dtype"]
            and a["qmin"] <= b["qmin"] and a["qmax"] >= b["qmax"])


def drop_cancelling_qdq(gm: GraphModule) -> bool:
    changed = False
    for q in list(gm.graph.nodes):
        if not is_call(q, QUANTIZE):
            continue
        dq = q.args[0]
        if is_call(dq, DEQUANTIZE) and cancels(q, dq):
            q.replace_all_uses_with(dq.args[0])
            changed = True
    return finish(gm, changed)
