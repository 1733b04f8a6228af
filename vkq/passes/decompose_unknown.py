"""decompose_unknown_ops: ATen ops that no vkq rule names, replaced right after torch.export by
the decompositions torch.export itself knows (its default table: aliases such as aten.concat,
arccos, special_erf, hstack / vstack / column_stack, fliplr, inner, tensordot, take_along_dim,
trapezoid, nanmean, addr, diag_embed, linalg_cross, ...), before the quantizer annotates. Each
would otherwise run in torch on the CPU; as aten.cat, acos, erf, gather, mul, sum, ... the rules
of the passes, the quantizer and the lowering take them.

An op that any of vkq's rule tables names (the lowering's, the quantizer's annotators', the
passes' and the ops' own op sets) is kept as export made it: vkq folds aten.linear, conv2d,
layer_norm, einsum, pad, ... as they are, and their decompositions would undo that.
"""
from __future__ import annotations

import functools
import importlib
import logging
import pkgutil

import torch
from torch._ops import OpOverload, OpOverloadPacket

log = logging.getLogger("vkq")


def _names_in(value, depth: int = 0):
    """The ATen op names (packets: 'linear', 'cat') in a module-level value: an op, or a table
    (dict keys and values, set / list / tuple members) of them, two levels deep."""
    if isinstance(value, OpOverload):
        yield value.name().split("::")[-1].split(".")[0]
    elif isinstance(value, OpOverloadPacket):
        yield value._qualified_op_name.split("::")[-1]
    elif depth < 2 and isinstance(value, dict):
        for k, v in value.items():
            yield from _names_in(k, depth + 1)
            yield from _names_in(v, depth + 1)
    elif depth < 2 and isinstance(value, (set, frozenset, list, tuple)):
        for v in value:
            yield from _names_in(v, depth + 1)


@functools.lru_cache(maxsize=1)
def vkq_op_names() -> frozenset:
    """Every ATen op name that a table in vkq.lower, vkq.aten_rules, vkq.quantizer, vkq.passes.* or vkq.ops.*
    holds: the ops vkq has a rule for, in some overload."""
    import vkq.ops
    import vkq.passes
    modules = ["vkq.lower", "vkq.aten_rules", "vkq.quantizer"]
    for pkg in (vkq.passes, vkq.ops):
        modules += [f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)]
    names = set()
    for name in modules:
        for value in vars(importlib.import_module(name)).values():
            names.update(_names_in(value))
    return frozenset(names)


@functools.lru_cache(maxsize=1)
def _decomposable() -> frozenset:
    # (the table's own `in` rebuilds it: ~30 ms a lookup)
    return frozenset(torch.export.default_decompositions().keys())


def unknown_ops(graph) -> list:
    """The call targets in `graph` that torch.export can decompose and no vkq rule names."""
    table, known = _decomposable(), vkq_op_names()
    return sorted({n.target for n in graph.nodes if n.op == "call_function" and isinstance(n.target, OpOverload)
                   and n.target in table and _base_name(n.target) not in known}, key=str)


def _base_name(op: OpOverload) -> str:
    """'silu' for aten.silu_.default: an in-place op is its functional one's (functionalize.py
    rewrites every in-place op so, whatever its name)."""
    name = op.name().split("::")[-1].split(".")[0]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def decompose_unknown_ops(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """ep with its unknown ops (unknown_ops) decomposed by torch.export's own table, repeated while
    a decomposition leaves another (hstack -> atleast_1d + cat); ep itself where it has none, or
    where torch cannot retrace it (the ops then run on the CPU, as they would have)."""
    tried = set()
    for _ in range(4):
        ops = [op for op in unknown_ops(ep.graph) if op not in tried]    # (one the table keeps: once)
        if not ops:
            break
        tried.update(ops)
        table = torch.export.default_decompositions()
        try:
            ep = ep.run_decompositions({op: table[op] for op in ops})
        except Exception as e:      # (torch's retrace of the whole program: keep the graph as it is)
            log.warning("vkq: could not decompose %s (%s: %s); they run on the CPU",
                        ", ".join(map(str, ops)), type(e).__name__, str(e).splitlines()[0][:200])
            break
        _reshapes_for_views(ep.graph_module)
    return ep


def _reshapes_for_views(gm) -> None:
    """The retrace spells every reshape as a view where the traced strides allowed one (a
    `.contiguous()` before it a clone): once the quantizer and the passes rewrite around it (a
    clone dropped as an identity), the view may no longer be possible. A reshape computes the
    same, viewing where it can; vkq lowers both alike."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default):
            n.target = torch.ops.aten.reshape.default
    gm.recompile()
