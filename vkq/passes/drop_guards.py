"""drop_guards: remove what torch.export leaves to check, not to compute: the `_guards_fn`
call_module nodes of `.module()` graphs (input shape checks) and assertion ops without users
(_assert_tensor_metadata, _assert_scalar, _assert_async). A Program has static shapes and
checks its inputs itself."""
from __future__ import annotations

import torch
from torch.fx import GraphModule

aten = torch.ops.aten
ASSERTS = {aten._assert_tensor_metadata.default, aten._assert_scalar.default, aten._assert_async.msg,
           aten._assert_async.default}


def _is_guard(node) -> bool:
    if node.users:
        return False
    if node.op == "call_module":
        return "guard" in str(node.target)
    return node.op == "call_function" and node.target in ASSERTS


def drop_guards(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        if _is_guard(node):
            gm.graph.erase_node(node)
            changed = True
    if changed:
        gm.recompile()
    return changed
