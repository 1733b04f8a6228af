"""fuse_activation: an activation whose every user is a quantize becomes those quantizes' range.

    y = relu(x); q = quantize(y, s, zp, -128, 127)   ->   q = quantize(x, s, zp, qmin', qmax')

Quantization is monotonic, so quantize(clamp(x, lo, hi)) == clamp(quantize(x), quantize(lo),
quantize(hi)) exactly (vkq.quant.activation_bounds). The rewritten graph computes the same
numbers and stays runnable by torch; fold_qdq_patterns then carries (qmin', qmax') into the
producing int8 op (conv2d_q8, linear_q8, add_q8, ...), and a standalone dq -> relu -> q becomes
a quantize(dequantize(x)) with a narrower range, i.e. a clamp_q8.

Only when every user is a per-tensor int8 quantize: a float user still needs the clamped value.
"""
from __future__ import annotations

import math

import torch

from torch.fx import GraphModule, Node

from ..quant import activation_bounds
from ._graph import QUANTIZE, aten, finish, is_call, q_args

ACTIVATIONS = {aten.relu.default, aten.hardtanh.default}


def _bounds(act: Node) -> tuple[str, tuple | None]:
    if act.target == aten.relu.default:
        return "relu", None
    lo = act.args[1] if len(act.args) > 1 else act.kwargs.get("min_val", -1.0)
    hi = act.args[2] if len(act.args) > 2 else act.kwargs.get("max_val", 1.0)
    return "hardtanh", (float(lo), float(hi))


def _narrow(q: Node, activation: str, bounds) -> None:
    a = q_args(q)
    lo, hi = activation_bounds(activation, a["scale"], a["zero_point"], bounds)
    args = list(q.args)
    args[3], args[4] = max(a["qmin"], lo), min(a["qmax"], hi)
    q.args = tuple(args)


def fuse_activation(gm: GraphModule) -> bool:
    changed = False
    for act in list(gm.graph.nodes):
        if not is_call(act, ACTIVATIONS) or not act.users:
            continue
        if not all(is_call(u, QUANTIZE) and u.args[0] is act and q_args(u)["dtype"] == torch.int8
                   for u in act.users):
            continue
        activation, bounds = _bounds(act)
        if bounds is not None and not all(math.isfinite(b) for b in bounds):
            continue
        for q in list(act.users):
            _narrow(q, activation, bounds)
            q.replace_input_with(act, act.args[0])
        changed = True
    return finish(gm, changed)
