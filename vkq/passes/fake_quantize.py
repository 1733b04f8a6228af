"""fake_quantize: dequantize(quantize(x)) of a float x, where the dequantize is the quantize's
only reader -> vkq fake_quantize(x) (vkq/ops/io.py): one float pass instead of a packed int8
tensor written and read back. What is left of such pairs after folding sits between float ops:
a static attention's scores (matmul -> q/dq -> bias add -> q/dq -> softmax). Exact: the op
computes both steps as the two kernels do.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule

from ._graph import DEQUANTIZE, QUANTIZE, dtype_of, finish, is_call, q_args, set_val, shape_of, vkq_target


def fake_quantize(gm: GraphModule) -> bool:
    changed = False
    for dq in list(gm.graph.nodes):
        q = dq.args[0] if is_call(dq, DEQUANTIZE) else None
        if q is None or not is_call(q, QUANTIZE) or len(q.users) != 1 or dtype_of(q.args[0]) != torch.float32 \
                or dtype_of(dq) != torch.float32:
            continue
        a, b = q_args(q), q_args(dq)
        if a["dtype"] != torch.int8 or (a["scale"], a["zero_point"]) != (b["scale"], b["zero_point"]):
            continue
        with gm.graph.inserting_before(dq):
            fq = gm.graph.call_function(vkq_target("fake_quantize"), (q.args[0],),
                                        {"scale": float(a["scale"]), "zero_point": int(a["zero_point"]),
                                         "qmin": int(a["qmin"]), "qmax": int(a["qmax"])})
        set_val(fq, shape_of(dq), torch.float32)
        dq.replace_all_uses_with(fq)
        gm.graph.erase_node(dq)
        gm.graph.erase_node(q)
        changed = True
    return finish(gm, changed)
