"""index_copy(cache, dim, index, vkq::kv_quantize(x)) -> vkq::index_copy_q8(cache, dim, index, x).

The int8 KV cache (vkq.lm_compile, kv_cache="int8") writes a step's new key and value rows as
kv_quantize's int8 rows with index_copy_ at the positions. Fused, one dispatch quantizes the
rows and writes them into the cache (vkq.ops.kv_q8 index_copy_q8, planned in place into the
state's buffer as the float cache's index_copy is): a decode step has the float cache's
dispatches, not two more a layer. Only where the quantized rows are read by the write alone.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule

from ._graph import op_name

aten = torch.ops.aten


def fuse_kv_write(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.index_copy.default or len(node.args) < 4:
            continue
        cache, dim, index, rows = node.args[:4]
        if not isinstance(rows, torch.fx.Node) or rows.op != "call_function" \
                or op_name(rows.target) != "vkq.kv_quantize" or len(rows.users) != 1:
            continue
        with gm.graph.inserting_before(node):
            fused = gm.graph.call_function(torch.ops.vkq.index_copy_q8.default, (cache, dim, index, rows.args[0]))
        fused.meta.update(node.meta)
        node.replace_all_uses_with(fused)
        gm.graph.erase_node(node)
        gm.graph.erase_node(rows)
        changed = True
    if changed:
        gm.recompile()
    return changed
