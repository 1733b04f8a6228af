"""permute_in_float: the int8 permutes and views next to a float matmul (attention's) move to
its float side, where the lowering folds them into the matmul's strided reads and writes
(vkq/ops/float_rewrites.py fold_views_into_matmul): no gather of their own.

  dequantize(permute(x_int8)), read only by float matmuls  -> permute(dequantize(x_int8))
  views(quantize(matmul(...))), the quantize read only by the views, each by the next
                                                           -> quantize(views(matmul(...)))

Attention's K transpose (Swin: k.transpose(-2, -1) on the int8 k picked out of the packed
projection) was an int8 gather and its dequantize wrote the transposed copy; the float matmul
then read b along rows of N (not a multiple of 4) one value at a time. Dequantized first, the
transpose is a float view that the lowering folds into the matmul's strided read
(vkq/ops/float_rewrites.py fold_views_into_matmul): no gather, and a K read along d by vec4 (VEC_K).
Swin-T's (64, 3, 49, 32) @ (64, 3, 32, 49) on lavapipe: 12.3 -> 3.0 ms. The head merge after
P V (transpose, reshape) is the same on the way out: the matmul writes the merged rows and the
quantize writes them where the projection reads them (4H4W, rows of heads x d: vec4 stores)
instead of an int8 transpose and a repack. Exact: a per-tensor quantize or dequantize commutes
with any permutation or view.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule

from ._graph import (DEQUANTIZE, PERMUTES, QUANTIZE, SHAPE_OF, VIEWS, aten, dtype_of, dynamic_size, finish, is_call,
                     set_val, shape_of)

MATMULS = {aten.matmul.default, aten.bmm.default}


def _like(node, shaped, dtype):
    """node holds a value of `shaped`'s shape, in dtype; a dynamic program reads its symbolic
    shape off the exported node `shaped` stands for (SHAPE_OF)."""
    node.meta[SHAPE_OF] = shaped.meta.get(SHAPE_OF, shaped.name)
    return set_val(node, shape_of(shaped), dtype)


def permute_in_float(gm: GraphModule) -> bool:
    changed = _dequantize_first(gm)
    changed |= _quantize_last(gm)
    return finish(gm, changed)


def _quantize_last(gm: GraphModule) -> bool:
    changed = False
    for q in list(gm.graph.nodes):
        if not (is_call(q, QUANTIZE) and is_call(q.args[0], MATMULS) and len(q.args[0].users) == 1):
            continue
        chain, cur = [], q                    # the int8 views after q, each the only reader of the one before
        while len(cur.users) == 1 and is_call(next(iter(cur.users)), PERMUTES | VIEWS) \
                and dtype_of(next(iter(cur.users))) == torch.int8:
            cur = next(iter(cur.users))
            chain.append(cur)
        if not chain or any(dynamic_size(n) for n in [q, *chain]):
            continue                          # (new nodes' shapes would not be symbolic)
        prev = q.args[0]
        with gm.graph.inserting_before(chain[-1]):
            for v in chain:                   # the same views on the matmul's float output
                prev = _like(gm.graph.call_function(v.target, (prev, *v.args[1:]), dict(v.kwargs)), v,
                             dtype_of(q.args[0]))
            moved = gm.graph.call_function(q.target, (prev, *q.args[1:]), dict(q.kwargs))
        moved.meta.update(chain[-1].meta)     # its value (and PT2E source, if the last view had one)
        _like(moved, chain[-1], torch.int8)
        chain[-1].replace_all_uses_with(moved)
        for v in reversed(chain):
            gm.graph.erase_node(v)
        gm.graph.erase_node(q)
        changed = True
    return changed


def _dequantize_first(gm: GraphModule) -> bool:
    changed = False
    for dq in list(gm.graph.nodes):
        perm = dq.args[0] if is_call(dq, DEQUANTIZE) else None
        if perm is None or not is_call(perm, PERMUTES) or dtype_of(perm) != torch.int8 or len(perm.users) != 1 \
                or not dq.users or not all(is_call(u, MATMULS) for u in dq.users) \
                or dynamic_size(perm) or dynamic_size(perm.args[0]):
            continue
        src = perm.args[0]
        with gm.graph.inserting_before(dq):
            whole = gm.graph.call_function(dq.target, (src, *dq.args[1:]), dict(dq.kwargs))
            moved = gm.graph.call_function(perm.target, (whole, *perm.args[1:]), dict(perm.kwargs))
        _like(whole, src, dtype_of(dq))
        _like(moved, dq, dtype_of(dq))
        dq.replace_all_uses_with(moved)
        gm.graph.erase_node(dq)
        gm.graph.erase_node(perm)
        changed = True
    return changed
