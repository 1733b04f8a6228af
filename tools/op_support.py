"""Writes docs/op-support.md: every vkq op of the registry (vkq.registry.OPS) and every aten op
that a rule translates (the int8 folds of vkq/passes/fold_qdq_patterns.py, the rules of
vkq/aten_rules.py), with where each runs. The page is generated: edit this script, not the page.

    python tools/op_support.py            # rewrite docs/op-support.md
    python tools/op_support.py --check    # exit 1, saying so, when the committed page is stale

Which vkq ops an aten rule emits is read from the rule itself, without running it: the op name
of each `return (op, inputs, attrs)` (a string, a closure's string such as _unary("exp")'s, or a
local variable assigned one), following the rules and helpers it returns the result of; for a
fold rule (which emits through emit_for_q(gm, q, "conv2d_q8", ...)) and for a lambda, the op
names among its string constants, following the module's own functions it calls. So a rule may
list an op it emits only for some arguments (a clamp beside a pool whose qparams differ).
"""
from __future__ import annotations

import argparse
import ast
import inspect
import sys
import textwrap
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "op-support.md"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_LAYOUTS = ("4W4C", "4H4W")


def _ops():
    from vkq.registry import OPS, _load_ops
    _load_ops()
    return OPS


def _string_consts(code: types.CodeType):
    for k in code.co_consts:
        if isinstance(k, str):
            yield k
        elif isinstance(k, types.CodeType):
            yield from _string_consts(k)


def _called_functions(fn: types.FunctionType, module: str):
    """The functions of `module` that fn's code (nested code included) names."""
    def names(code):
        yield from code.co_names
        for k in code.co_consts:
            if isinstance(k, types.CodeType):
                yield from names(k)
    for n in names(fn.__code__):
        g = fn.__globals__.get(n)
        if isinstance(g, types.FunctionType) and g.__module__ == module:
            yield g


def _closure(fn) -> dict:
    cells = fn.__closure__ or ()
    return {name: c.cell_contents for name, c in zip(fn.__code__.co_freevars, cells)}


def _by_constants(fn, ops, seen) -> set:
    """Op names among fn's string constants and its closure's, following the functions of its
    module that it calls and the functions its closure holds."""
    if id(fn) in seen:
        return set()
    seen.add(id(fn))
    found = {s for s in _string_consts(fn.__code__) if s in ops}
    for v in _closure(fn).values():
        if isinstance(v, str) and v in ops:
            found.add(v)
        elif isinstance(v, types.FunctionType):
            found |= _emitted(v, ops, seen)
    for g in _called_functions(fn, fn.__module__):
        found |= _by_constants(g, ops, seen)
    return found


def _targets_tested(test, fn) -> set | None:
    """The aten targets an `if` test limits its body to (`n.target in (aten.div.Tensor_mode, ...)`
    or `n.target == aten.x`, alone or in an `and`), or None where it does not."""
    tests = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    for t in tests:
        if (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], (ast.In, ast.Eq))
                and isinstance(t.left, ast.Attribute) and t.left.attr == "target"):
            try:
                value = eval(compile(ast.Expression(t.comparators[0]), "<rule>", "eval"), fn.__globals__, _closure(fn))
            except Exception:
                return None
            return set(value) if isinstance(t.ops[0], ast.In) else {value}
    return None


def _emitted(fn, ops, target=None, seen=None) -> set:
    """The vkq ops a rule function may return for `target` (see the module docstring)."""
    seen = set() if seen is None else seen
    if fn.__name__ == "<lambda>":
        return _by_constants(fn, ops, seen)
    if id(fn) in seen:
        return set()
    seen.add(id(fn))
    body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    closure, env = _closure(fn), fn.__globals__
    assigned: dict[str, list] = {}      # name -> the expressions assigned to it (on this target's paths)
    returns: list = []

    def visit(stmts):
        for st in stmts:
            if isinstance(st, ast.If):
                only = _targets_tested(st.test, fn)
                if only is None or target is None or target in only:
                    visit(st.body)
                visit(st.orelse)
            elif isinstance(st, ast.Assign):
                for tg in st.targets:
                    if isinstance(tg, ast.Name):
                        assigned.setdefault(tg.id, []).append(st.value)
            elif isinstance(st, ast.Return):
                returns.append(st.value)
            elif isinstance(st, (ast.For, ast.While, ast.With, ast.Try)):
                visit(st.body)
                visit(getattr(st, "orelse", []))
                for h in getattr(st, "handlers", []):
                    visit(h.body)

    def names_of(expr, depth=0) -> set:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value} if expr.value in ops else set()
        if isinstance(expr, ast.BoolOp):          # name or ("cummax" if ... else "cummin")
            first = expr.values[0]
            if (isinstance(expr.op, ast.Or) and isinstance(first, ast.Name) and first.id not in assigned
                    and isinstance(closure.get(first.id), str) and closure[first.id]):
                return names_of(first, depth)     # (a closure's name given: the rest is never taken)
            return set().union(*(names_of(v, depth) for v in expr.values))
        if isinstance(expr, ast.IfExp):
            return names_of(expr.body, depth) | names_of(expr.orelse, depth)
        if isinstance(expr, ast.Name) and depth < 4:
            out = set().union(*(names_of(v, depth + 1) for v in assigned.get(expr.id, [])))
            v = closure.get(expr.id)
            if isinstance(v, str) and v in ops:
                out.add(v)
            return out
        return set()

    def collect(expr) -> set:
        found = set()
        for node in ast.walk(expr) if expr is not None else ():
            # (op, inputs, attrs): a rule's result; ("sum", "mean", "max") is not one
            if (isinstance(node, ast.Tuple) and len(node.elts) == 3
                    and not (isinstance(node.elts[1], ast.Constant) and isinstance(node.elts[1].value, str))):
                found |= names_of(node.elts[0])
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                callee = closure.get(node.func.id, env.get(node.func.id))
                if isinstance(callee, types.FunctionType) and callee.__module__ == fn.__module__:
                    found |= _emitted(callee, ops, target, seen)
        return found

    visit(body.body)
    return set().union(*(collect(r) for r in returns))


def _first_sentence(doc: str, limit: int = 170) -> str:
    para = " ".join(line.strip() for line in doc.strip().split("\n\n")[0].splitlines())
    cut = para.find(". ")
    text = para if cut < 0 else para[:cut + 1]
    if len(text) > limit:
        text = text[:limit - 1].rstrip() + "…"
    return _cell(text)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _where(op: str, ops) -> str:
    return f"`{op}`" if ops[op].build is not None else f"`{op}` (CPU)"


def _takes_int8(d) -> bool:
    return (d.layouts != DEFAULT_LAYOUTS or "_q8" in d.name or "int8" in d.doc.lower())


def _aten_rows(ops):
    """{aten op (name without overload): {"overloads", "int8", "rule", "float_only"}}."""
    from vkq import aten_rules
    from vkq.passes import fold_qdq_patterns
    from vkq.passes._graph import op_name
    rows: dict[str, dict] = {}

    def row(target):
        name = op_name(target)
        r = rows.setdefault(name, {"overloads": set(), "int8": set(), "rule": set(), "float_only": False})
        overload = getattr(target, "_overloadname", None)
        if overload:
            r["overloads"].add(overload)
        return r

    for target, fold in fold_qdq_patterns.FOLD_RULES.items():
        row(target)["int8"] |= _by_constants(fold, ops, set())
    for target, rule in aten_rules.CPU_RULES.items():
        r = row(target)
        r["rule"] |= _emitted(rule, ops, target)
        r.setdefault("float_only_overloads", []).append(rule.__qualname__.startswith("_float_only"))
        r["float_only"] = all(r["float_only_overloads"])
    for name, rule in aten_rules.RULES_BY_NAME.items():
        r = rows.setdefault(name, {"overloads": set(), "int8": set(), "rule": set(), "float_only": False})
        r["rule"] |= _emitted(rule, ops)
    return rows


def render() -> str:
    ops = _ops()
    rows = _aten_rows(ops)
    on_vulkan = sum(d.build is not None for d in ops.values())
    out = [
        "# Op support",
        "",
        "<!-- Generated by tools/op_support.py from vkq.registry.OPS, vkq/passes/fold_qdq_patterns.py and",
        "     vkq/aten_rules.py. Do not edit: run `python tools/op_support.py`; tests/test_docs.py checks it. -->",
        "",
        "This page lists where each op runs.",
        "The first table is the aten ops that a rule translates; the second is every vkq op of the registry.",
        "How a graph gets from aten ops to vkq ops is in [lowering.md](lowering.md).",
        "",
        "How to read it:",
        "",
        "- **int8** is the vkq op(s) that `fold_qdq_patterns` makes of a PT2E `dequantize -> op -> quantize`.",
        "  These run on int8 tensors, with int32 accumulation and fixed-point requantization.",
        "- **otherwise** is the vkq op(s) the rule of `vkq/aten_rules.py` makes of the op",
        "  where no fold applies: float32 tensors, int32 ids and masks, bools.",
        "  *float only* marks ops whose every rule declines unless every tensor is float;",
        "  integer and bool arithmetic then stays with torch on the CPU.",
        "- An op marked (CPU) has no Vulkan kernel: its numpy reference runs on the CPU.",
        "- A rule may decline a node (an argument its kernel does not take); the node then runs in torch on the CPU",
        "  (`torch_op`), and `prog.fallback_ops` names it and says why.",
        "  A node the device cannot run correctly (a tensor past its storage buffer range, a loop past llvmpipe's limit)",
        "  runs its reference on the CPU, named the same way.",
        "- A rule lists every op it may emit; some it emits only for some arguments.",
        "- Other passes make int8 ops too: `fuse_activation` folds a relu / relu6 / hardtanh before a quantize into",
        "  its bounds; `views_to_repack` makes each view of int8 (reshape, permute, slice, ...) one `repack`;",
        "  `fuse_epilogue` folds residual adds, tables and a final dequantize into the conv or linear before them.",
        "- An aten op missing from the table is either rewritten by a pass into ops that are here",
        "  (`decompose_unknown`, `normalize_ops`, `decompose_ops`: var, logsumexp, lerp, topk, one_hot, ...)",
        "  or run by torch on the CPU.",
        "",
        f"## aten ops ({len(rows)})",
        "",
        "| aten op | overloads | int8 | otherwise |",
        "|---|---|---|---|",
    ]
    for name in sorted(rows):
        r = rows[name]
        int8 = ", ".join(_where(o, ops) for o in sorted(r["int8"])) or "–"
        other = ", ".join(_where(o, ops) for o in sorted(r["rule"])) or "–"
        if r["float_only"]:
            other += " *float only*"
        overloads = ", ".join(sorted(r["overloads"]))
        out.append(f"| `{name}` | {overloads} | {int8} | {other} |")
    out += [
        "",
        f"## vkq ops ({len(ops)}: {on_vulkan} with a Vulkan kernel)",
        "",
        "**int8 layouts**: the packed layouts an int8 tensor of the op may have (the registry's `layouts`);",
        "– where the op takes no int8 tensor (its name and doc mention none).",
        "A node whose int8 tensor is in another layout runs on the CPU (`vkq.registry.cpu_reason`).",
        "",
        "| op | Vulkan kernel | int8 layouts | shaders | what it is |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(ops):
        d = ops[name]
        kernel = "yes" if d.build is not None else "no (CPU)"
        layouts = ", ".join(d.layouts) if _takes_int8(d) else "–"
        shaders = ", ".join(f"`{s}`" for s in d.shaders) or "–"
        out.append(f"| `{name}` | {kernel} | {layouts} | {shaders} | {_first_sentence(d.doc)} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/op-support.md is not what this writes")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = PAGE.read_text() if PAGE.exists() else None
        if current != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run `python tools/op_support.py` and commit it", file=sys.stderr)
            return 1
        print(f"{PAGE.relative_to(ROOT)} is current")
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
