"""drop_guards: remove the `_guards_fn` call_module nodes torch.export leaves in `.module()`
graphs. They check the inputs' shapes when run eagerly and compute nothing a Program needs."""
from __future__ import annotations

from torch.fx import GraphModule


def drop_guards(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and not node.users and "guard" in str(node.target):
            gm.graph.erase_node(node)
            changed = True
    if changed:
        gm.recompile()
    return changed
