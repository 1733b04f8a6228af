"""int8_embeddings: where lower() was asked (int8_embeddings=True, gm.meta KEY), each embedding
of a float constant table becomes embedding_q8rows of the table's int8 rows.

    aten.embedding(get_attr table float (V, H), ids)
        -> embedding_q8rows(ids, table int8 (V, H), scale float32 (V,))     (vkq/ops/embedding_q8.py)

with (table, scale) = vkq.quantizer.quantize_rows(table): the int8 values and scales a linear
weight of the same matrix gets, so a token embedding tied to its lm_head is the lm_head's weight
constant (the program keeps equal constants once) and the float table leaves the program. Under
every scheme (no quantizer annotates an embedding); off by default, the float gather otherwise
(an int8 table changes the model's values, by at most half a step of its row's scale).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule

from ._graph import aten, const_value, finish, is_call, shape_of
from .fold_qdq_patterns import emit

KEY = "vkq_int8_embeddings"


def int8_embeddings(gm: GraphModule) -> bool:
    if not gm.meta.get(KEY):
        return False
    from ..quantizer import quantize_rows
    changed = False
    for node in list(gm.graph.nodes):
        if not is_call(node, {aten.embedding.default}):
            continue
        table = const_value(gm, node.args[0])
        if table is None or not table.is_floating_point() or table.dim() != 2:
            continue
        q, scale = quantize_rows(table.float().numpy())
        new = emit(gm, node, "embedding_q8rows", [node.args[1]], {"table": q, "scale": scale}, {},
                   shape_of(node), torch.float32)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        changed = True
    return finish(gm, changed)
