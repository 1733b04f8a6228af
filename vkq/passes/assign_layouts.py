"""assign_layouts: give every int8 tensor a packed layout (node.meta["vkq_layout"]) and put an
explicit `repack` only where a producer and a consumer disagree.

  4W4C  convolutions and pools read and write it: a conv chain stays 4W4C throughout;
  4H4W  linear_q8 and layer_norm_q8 read and write it.
  ROW   tensors of rank 5 and 6 (vkq/packing.py): shape ops and quantize/dequantize take it.
Elementwise ops (add_q8, mul_q8, clamp_q8, cat_q8, lut_q8) write the layout of their first input and
need every input in it. Free producers (quantize, repack, shape ops, CPU ops, constants) write
the layout their consumers want (looking through elementwise ops), else (a move of a ROW or
4H4W tensor: 4H4W, _along_rows) 4W4C for 4-D tensors, 4H4W for lower ranks and ROW for higher.
A repack with one consumer just writes what that consumer wants: a flatten between the last
conv and the first linear becomes one repack, 4W4C (N, C, H, W) -> 4H4W (N, C*H*W).

The tables OUTPUT_LAYOUT, INPUT_LAYOUT and FOLLOW are the rules.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ._graph import PERMUTES, aten, dtype_of, finish, is_call, is_vkq, qparams, set_val, shape_of, vkq_op_of, vkq_target

OUTPUT_LAYOUT = {"conv2d_q8": "4W4C", "max_pool2d_q8": "4W4C", "avg_pool2d_q8": "4W4C",
                 "adaptive_avg_pool2d_q8": "4W4C", "adaptive_max_pool2d_q8": "4W4C", "max_unpool2d_q8": "4W4C",
                 "linear_q8": "4H4W",
                 "layer_norm_q8": "4H4W"}
INPUT_LAYOUT = {"conv2d_q8": "4W4C", "max_pool2d_q8": "4W4C", "avg_pool2d_q8": "4W4C",
                "adaptive_avg_pool2d_q8": "4W4C", "adaptive_max_pool2d_q8": "4W4C", "max_unpool2d_q8": "4W4C",
                "linear_q8": "4H4W", "linear_q8_fout": "4H4W", "layer_norm_q8": "4H4W"}
FOLLOW = {"add_q8", "mul_q8", "clamp_q8", "cat_q8", "lut_q8"}
KEY = "vkq_layout"


def rank_layout(rank: int) -> str:
    """The layout an int8 tensor gets when no consumer asks for one: 4W4C for (N, C, H, W),
    4H4W for ranks 1-3, ROW (row-major) for ranks 5 and up, which the blocked layouts cannot hold."""
    return "4W4C" if rank == 4 else "4H4W" if rank < 4 else "ROW"


def default_layout(node: Node) -> str:
    return rank_layout(len(shape_of(node)))


def _activation_inputs(node: Node) -> list[Node]:
    """The tensors node reads in its own layout: its first operand, a constant too (SwinV2's
    position-bias MLP runs its linears on a constant coordinate table), and every operand that
    is not a constant (weights, tables and epilogue constants are packed by the op); every
    operand of an elementwise op but lut_q8's table."""
    args = [a for a in node.args if isinstance(a, Node)]
    op = vkq_op_of(node)
    if op in FOLLOW and op != "lut_q8":
        return args
    return [a for i, a in enumerate(args) if i == 0 or a.op != "get_attr"]


def required(producer: Node, user: Node) -> str | None:
    """The layout `user` needs `producer`'s tensor in, or None if any will do (or if it cannot
    be had: a rank-5 tensor stays ROW, and an op that reads it runs on the CPU)."""
    if len(shape_of(producer)) > 4:
        return None
    op = vkq_op_of(user)
    if op in INPUT_LAYOUT and producer in _activation_inputs(user):   # a conv's residual operand too
        return INPUT_LAYOUT[op]
    if op in FOLLOW and producer in _activation_inputs(user):
        return user.meta.get(KEY)
    return None


def _wanted(node: Node, memo: dict) -> str | None:
    """What node's consumers would like it to be (through elementwise ops). The elementwise
    users below node are settled first, deepest first, without recursion: an unrolled LSTM's
    chain of thousands of them passed Python's recursion limit."""
    stack = [node]
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        below = [u for u in n.users if u not in memo and vkq_op_of(u) in FOLLOW
                 and not OUTPUT_LAYOUT.get(vkq_op_of(u)) and _activation_inputs(u)[:1] == [n]]
        if below:
            stack.extend(below)
            continue
        stack.pop()
        memo[n] = None
        for user in n.users:
            op = vkq_op_of(user)
            if op in INPUT_LAYOUT and n in _activation_inputs(user):
                memo[n] = INPUT_LAYOUT[op]
                break
            if op in FOLLOW and _activation_inputs(user)[:1] == [n]:
                w = OUTPUT_LAYOUT.get(op) or memo[user]
                if w:
                    memo[n] = w
                    break
    return memo[node]


def _choose(node: Node, memo: dict) -> str:
    if len(shape_of(node)) > 4:
        return "ROW"
    op = vkq_op_of(node)
    if op in OUTPUT_LAYOUT:
        return OUTPUT_LAYOUT[op]
    if op in FOLLOW and _activation_inputs(node):     # (an op on constants alone has none)
        first = _activation_inputs(node)[0]
        return first.meta.get(KEY) or default_layout(first)
    return _wanted(node, memo) or _along_rows(node) or default_layout(node)


MOVES = PERMUTES | {aten.select.int, aten.slice.Tensor}


def _along_rows(node: Node) -> str | None:
    """4H4W for a rank-4 move (select, slice, permute, repack) of a ROW or 4H4W tensor that no
    consumer asks a layout of: attention's q, k, v picked out of a packed projection (Swin's
    (3, B, heads, N, d)). Their bytes run along the last dim as the source's do, so the gather
    moves whole words where the rows start on one, and a dequantize writes float rows as they
    lie; 4W4C would put the bytes along dim 1 (3 heads padded to 4) and gather byte by byte
    (Swin-T's q/k/v select on lavapipe: 3.4x the time)."""
    src = node.args[0] if node.args and isinstance(node.args[0], Node) else None
    if src is None or dtype_of(src) != torch.int8 or not (is_vkq(node, "repack") or is_call(node, MOVES)):
        return None
    return "4H4W" if src.meta.get(KEY) in ("ROW", "4H4W") else None


def _repack(gm, src: Node, layout: str, cache: dict) -> Node:
    if (src, layout) in cache:
        return cache[(src, layout)]
    with gm.graph.inserting_after(src):
        node = gm.graph.call_function(vkq_target("repack"), (src,), {"shape": None})
    set_val(node, shape_of(src), torch.int8)
    node.meta[KEY] = layout
    qp = qparams(src)
    if qp is not None:
        node.meta["vkq_qparams"] = qp
    cache[(src, layout)] = node
    return node


def assign_layouts(gm: GraphModule) -> bool:
    memo: dict = {}
    changed = False
    int8 = [n for n in gm.graph.nodes if dtype_of(n) == torch.int8 and n.op != "output"]
    for node in int8:
        layout = _choose(node, memo)
        if node.meta.get(KEY) != layout:
            node.meta[KEY] = layout
            changed = True
    cache: dict = {}
    for node in int8:
        for user in list(node.users):
            need = required(node, user)
            if need is None or need == node.meta[KEY]:
                continue
            if is_vkq(node, "repack") and len(node.users) == 1:
                node.meta[KEY] = need               # the repack writes what its consumer reads
                continue
            user.replace_input_with(node, _repack(gm, node, need, cache))
            changed = True
    changed |= _drop_noop_repacks(gm)
    return finish(gm, changed)


def _drop_noop_repacks(gm: GraphModule) -> bool:
    """A repack to the same shape and layout it reads is a copy of nothing."""
    changed = False
    for node in list(gm.graph.nodes):
        if is_vkq(node, "repack"):
            src = node.args[0]
            if shape_of(src) == shape_of(node) and src.meta.get(KEY) == node.meta.get(KEY):
                node.replace_all_uses_with(src)
                changed = True
    return changed
