"""Dynamic shapes through lowering: a converted PT2E graph exported with torch.export's
dynamic_shapes becomes one symbolic Program.

How, in three steps (lower() calls them when the graph's inputs have symbolic dims):
1. symbolic_shapes: run the converted graph once under the export's own FakeTensorMode, so
   every node gets its output shape in torch's symbols ("s31", "(((s16 - 1)//2)) + 1"), and
   every integer node (aten.sym_size and the arithmetic on it) its expression.
2. The passes and the translation run as for a static program, on the example inputs'
   concrete shapes; then symbolize turns that Program's specs into the symbolic shapes of the
   FX nodes they came from (a vkq op holds the value of the PT2E quantize node it replaced:
   meta["vkq_source"]), and an attr that equals its node's output shape into that shape.
3. verify: the same converted graph lowered again at a second shape (every symbol moved within
   its bounds) must equal the symbolic Program specialized to that shape — same nodes, attrs,
   specs and constants. A lowering that decided something from a concrete size (a tile, a
   divisor, a folded mask) fails here with the node and attr named, instead of computing
   something else at other shapes.
"""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import torch
from torch.fx import GraphModule, Node

from . import symbolic
from .passes._graph import SHAPE_OF
from .passes.decompose_fourier import FOURIER, fourier_shape
from .program import Program, TensorSpec


class DynamicShapeError(ValueError):
    """The model cannot be lowered with these dynamic dims (the message says where)."""


def _dims(shape) -> tuple:
    """torch sizes (ints and SymInts) -> ints and vkq.symbolic expression strings."""
    out = []
    for d in shape:
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            out.append(int(expr) if expr.is_number else str(expr))
        else:
            out.append(int(d))
    return tuple(out)


def _symint(v):
    if isinstance(v, torch.SymInt):
        expr = v.node.expr
        return int(expr) if expr.is_number else str(expr)
    return int(v)


def input_fake_values(gm: GraphModule) -> list | None:
    """The placeholders' FakeTensors when at least one has a symbolic dim, else None."""
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    if not vals or not all(isinstance(v, torch.Tensor) for v in vals):
        return None
    if not any(isinstance(d, torch.SymInt) for v in vals for d in v.shape):
        return None
    return vals


def symbolic_shapes(gm: GraphModule, fakes: list) -> tuple[dict, dict]:
    """({node name: shape of ints/expressions, or an int node's expression}, {symbol: (min, max)})
    from one run of gm under the fake mode the export made (no real data is touched)."""
    mode = fakes[0].fake_mode
    env = mode.shape_env
    shapes: dict = {}

    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = {}          # input symbol -> "x dim 2"
    for name, v in zip(placeholders, fakes):
        for i, d in enumerate(v.shape):
            if isinstance(d, torch.SymInt) and not d.node.expr.is_number:
                inputs.setdefault(d.node.expr, f"{name} dim {i}")

    class Propagate(torch.fx.Interpreter):
        def run_node(self, n):
            result = _shape_only(self, n)
            result = super().run_node(n) if result is None else result
            fixed = sorted(where for s, where in inputs.items() if getattr(env.replacements.get(s), "is_number", False))
            if fixed:     # this op's shape rule fixed a dynamic dim to its example value
                raise DynamicShapeError(f"node {n.name!r} ({n.target}) fixes the dynamic {', '.join(fixed)} to its "
                                        "example value while tracing: these dims cannot be dynamic with this op")
            if isinstance(result, torch.Tensor):
                shapes[n.name] = _dims(result.shape)
            elif isinstance(result, (torch.SymInt, int)) and not isinstance(result, bool):
                shapes[n.name] = _symint(result)
            elif isinstance(result, (tuple, list)):
                for i, r in enumerate(result):
                    if isinstance(r, torch.Tensor):
                        shapes[f"{n.name}_{i}"] = _dims(r.shape)
            return result

        def call_module(self, target, args, kwargs):    # export's _guards_fn: nothing to compute
            if target == "_guards_fn" or str(target).startswith("_guards"):
                return None
            return super().call_module(target, args, kwargs)

    with mode, torch.no_grad():
        Propagate(gm).run(*fakes)
    used = set()
    for v in shapes.values():
        for d in (v if isinstance(v, tuple) else (v,)):
            used |= symbolic.symbols_of(d) if isinstance(d, str) else set()
    bounds = {}
    for sym, vr in env.var_to_range.items():
        name = str(sym)
        if name in used:
            hi = vr.upper
            finite = getattr(hi, "is_finite", True) and str(hi) not in ("oo", "int_oo")
            bounds[name] = (int(vr.lower), int(hi) if finite else None)
    return shapes, bounds


RESIZES = {"aten.upsample_nearest2d.vec", "aten._upsample_nearest_exact2d.vec", "aten.upsample_bilinear2d.vec",
           "aten.upsample_bicubic2d.vec"}


def _scaled(size, factor: float):
    """size * factor as an integer expression, where it is exact: a whole factor, or 2^-k."""
    if factor >= 1 and factor == int(factor):
        return size * int(factor)
    inverse = 1 / factor if factor > 0 else 0
    if 0 < factor < 1 and inverse == int(inverse) and int(inverse) & (int(inverse) - 1) == 0:
        return size // int(inverse)
    return None


def _shape_only(interp, n):
    """The output of a node whose ATen fake kernel cannot keep its sizes symbolic, as an empty
    tensor of the shape it computes (only shapes matter here); None: not such a node.
    - a 2-D resize by a whole scale factor (input size x factor) or by 1/2, 1/4, ... (input
      size // 2^k, what int(size * 2^-k) is exactly): torch's rule for scale factors,
      int(size * scale), a float of a symbol, fixes the dims to their example values;
    - a 2-D resize to a given size: the .vec kernels take concrete sizes only, and guard on the
      input's (fixing its batch);
    - aten.pad (F.pad) and constant_pad_nd (an even-kernel padding="same"): their kernels guard
      on the batch, and take concrete sizes only (padding up to a multiple of a window computes
      them from a dynamic dim);
    - im2col (F.unfold): its shape rule guards on the batch;
    - Fourier transforms of a real tensor (fft, fft2, fftn and the one-sided rfft*): their fake
      kernel collapses the batch dims with a reshape that fixes a dynamic length (FNet's tokens)."""
    if n.op != "call_function":
        return None
    args, kwargs = interp.fetch_args_kwargs_from_env(n)
    args = list(args)
    if str(n.target) in RESIZES and not kwargs:
        x, size, scales = args[0], args[1], args[-1]
        if size is not None:
            return x.new_empty((*x.shape[:-2], *size))
        sizes = [_scaled(x.shape[-2 + i], float(f)) for i, f in enumerate(scales or [])]
        return None if len(sizes) != 2 or None in sizes else x.new_empty((*x.shape[:-2], *sizes))
    if n.target in (torch.ops.aten.pad.default, torch.ops.aten.constant_pad_nd.default):
        x, pad = args[:2]
        shape = list(x.shape)
        for i in range(len(pad) // 2):
            shape[-1 - i] = shape[-1 - i] + pad[2 * i] + pad[2 * i + 1]
        return x.new_empty(shape)
    if n.target == torch.ops.aten.im2col.default:
        x, kernel, dilation, padding, stride = args[:5]
        blocks, rows = 1, x.shape[-3]
        for d in range(2):
            blocks = blocks * ((x.shape[-2 + d] + 2 * padding[d] - dilation[d] * (kernel[d] - 1) - 1) // stride[d] + 1)
            rows = rows * kernel[d]
        return x.new_empty((*x.shape[:-3], rows, blocks))
    if n.target in FOURIER and isinstance(args[0], torch.Tensor) and not args[0].is_complex():
        shape = fourier_shape(n, args[0])
        return None if shape is None else args[0].new_empty(shape, dtype=torch.complex64 if args[0].dtype != torch.float64
                                                                       else torch.complex128)
    return None


def _input_dims(gm: GraphModule, dynamic_shapes) -> list:
    """Per placeholder, its dynamic_shapes entry ({dim: Dim} or a list/tuple of Dim|None), or None."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if isinstance(dynamic_shapes, dict):
        specs = list(dynamic_shapes.values())
    else:
        specs = list(dynamic_shapes or [])
    out = []
    for i in range(len(placeholders)):
        spec = specs[i] if i < len(specs) else None
        if isinstance(spec, (list, tuple)):
            spec = {d: dim for d, dim in enumerate(spec) if dim is not None}
        out.append(spec if isinstance(spec, dict) else None)
    return out


def user_bounds(gm: GraphModule, shapes: dict, bounds: dict, dynamic_shapes=None) -> tuple[dict, dict]:
    """({symbol: (min, max)}, {symbol: "batch"}): the bounds and names the user gave each
    symbol's torch.export.Dim (export's own ranges are narrower: it assumes sizes >= 2), and
    export's range where no Dim says."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    final, names, derived = dict(bounds), {}, {}
    for n, spec in zip(placeholders, _input_dims(gm, dynamic_shapes)):
        for d, sym in enumerate(shapes.get(n.name, ())):
            if isinstance(sym, str) and not sym.isidentifier() and spec is not None and d in spec:
                derived.update({root: f"input {n.name!r} dimension {d} ({sym})" for root in symbolic.symbols_of(sym)})
                root, roots = getattr(spec[d], "root", None), symbolic.symbols_of(sym)
                if hasattr(root, "__name__") and len(roots) == 1:     # Dim("h") * 8: its symbol is h
                    names.setdefault(next(iter(roots)), root.__name__)
            if not (isinstance(sym, str) and sym.isidentifier()) or spec is None or d not in spec:
                continue
            dim = spec[d]
            lo, hi = getattr(dim, "min", None), getattr(dim, "max", None)
            names[sym] = getattr(dim, "__name__", sym)
            if isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi < 2 ** 31:
                final[sym] = (lo, hi)
    for sym, where in sorted(derived.items()):       # (export fixes a Dim's root silently where a
        lo, hi = final.get(sym, (None, None))           # guard pins it: selecsls's 32*h to h = 2)
        if lo is not None and lo == hi:
            warnings.warn(f"{where} was declared dynamic, but torch.export's guards fix {sym} to {lo}: "
                          "the program runs at that size only (often a size of 1 at the example; a larger "
                          "example input may keep it dynamic)", stacklevel=3)
    for sym, (lo, hi) in final.items():
        if hi is None:
            raise DynamicShapeError(f"dynamic dim {names.get(sym, sym)} has no upper bound: give torch.export.Dim "
                                    "a max= (vkq sizes its buffers for the largest shape)")
    return final, names


def symbolize(program: Program, gm: GraphModule, shapes: dict, bounds: dict, names: dict) -> Program:
    """The concrete Program lowered from gm at the example shapes, with every tensor's
    symbolic shape and shape attrs; its example shapes must come out of the expressions."""
    nodes = {n.name: n for n in gm.graph.nodes}
    example = {}
    for name in program.inputs:
        sym = shapes.get(name)
        if sym is None:
            raise DynamicShapeError(f"input {name!r} has no symbolic shape")
        for want, got in zip(sym, program.tensors[name].shape):
            if isinstance(want, str) and want.isidentifier():
                example[want] = got
    for name in program.inputs:        # derived dims (4*s0: torch.export's Dim * 4)
        for want, got in zip(shapes[name], program.tensors[name].shape):
            solved = symbolic.solve(want, got, example) if isinstance(want, str) else None
            if solved is not None:
                example[solved[0]] = solved[1]
    tensors = {}
    for t, spec in program.tensors.items():
        if t in program.constants:
            tensors[t] = spec
            continue
        sym = _symbolic_shape_of(t, program, nodes, shapes, tensors, gm.meta.get("vkq_stands_for", {}))
        if sym is None or len(sym) != len(spec.shape):
            raise DynamicShapeError(f"tensor {t!r}: vkq cannot tell how its shape {spec.shape} follows the inputs' "
                                    "dynamic dims")
        if symbolic.evaluate_shape(sym, example) != spec.shape:
            raise DynamicShapeError(f"tensor {t!r}: its symbolic shape {sym} gives "
                                    f"{symbolic.evaluate_shape(sym, example)} at the example, not {spec.shape}")
        tensors[t] = TensorSpec(sym, spec.dtype, spec.layout, spec.scale, spec.zero_point)
    new_nodes = []
    for node in program.nodes:
        attrs = node.attrs
        if len(node.outputs) == 1:
            out = program.tensors[node.outputs[0]].shape
            attrs = _shape_attrs(attrs, out, tensors[node.outputs[0]].shape)
        new_nodes.append(type(node)(node.op, node.inputs, node.outputs, attrs, node.name))
    meta = {**program.meta, "symbol_names": _described(program, tensors, names)}
    dyn = Program(tensors, new_nodes, program.inputs, program.outputs, program.constants, program.fallback, meta,
                  {s: bounds[s] for s in sorted(bounds)}, state=program.state, state_init=program.state_init)
    dyn.validate()
    return dyn


def _described(program: Program, tensors: dict, names: dict) -> dict:
    """{symbol: "batch"} -> {symbol: "batch"}, with export's own name where the user gave none."""
    out = {}
    for name in program.inputs:
        for d in tensors[name].shape:
            for sym in sorted(symbolic.symbols_of(d)):       # (8*s39: Dim("h") * 8's h)
                out.setdefault(sym, names.get(sym, sym))
    return out


def _symbolic_shape_of(t, program, nodes, shapes, done, stands_for):
    rank = len(program.tensors[t].shape)
    if rank == 0:                              # a 0-d tensor (a number among the outputs)
        return ()
    seen = t
    for _ in range(len(stands_for) + 1):       # a node a pass made holds the value of the one it replaced
        if seen in shapes and isinstance(shapes[seen], tuple) and len(shapes[seen]) == rank:
            return shapes[seen]
        fx = nodes.get(seen)
        for key in ("vkq_source", SHAPE_OF):     # the PT2E quantize it replaced; an exported node of its shape
            source = fx.meta.get(key) if fx is not None else None
            if source in shapes and isinstance(shapes[source], tuple) and len(shapes[source]) == rank:
                return shapes[source]
        if seen not in stands_for:
            break
        seen = stands_for[seen]
    if t.endswith("_float") and t[:-len("_float")] in done:           # the output's dequantize
        return done[t[:-len("_float")]].shape
    producer = next((n for n in program.nodes if t in n.outputs), None)
    if producer is None:
        return None
    concrete = program.tensors[t].shape
    derived = _sliced_or_joined(producer, program, done)
    if derived is not None:
        return derived
    ins = [i for i in producer.inputs if i in done and i not in program.constants]
    for i in ins:                              # a shape-preserving op: its input's shape
        if program.tensors[i].shape == concrete:
            return done[i].shape
    # A node with no counterpart in the exported graph (normalize_ops made mean over H and W an
    # adaptive_avg_pool2d to 1 x 1): each dim equal to the first same-rank input's at the
    # example is taken to be that dim, the others constants. A wrong guess cannot pass:
    # lower() checks the program against a lowering at another shape (verify).
    like = next((i for i in ins if len(program.tensors[i].shape) == rank), None)
    if like is None:
        return _unit_dims_moved(producer, program, done, concrete)
    return tuple(done[like].shape[d] if program.tensors[like].shape[d] == c else c for d, c in enumerate(concrete))


def _sliced_or_joined(producer, program, done):
    """The symbolic shape of a slice or a cat a pass made (diff's x[1:] - x[:-1] and its
    prepended values): the slice's length from its input's dim and its bounds, the cat's dim the
    sum of its inputs'. None for other ops (and a wrong shape cannot pass verify either)."""
    if not producer.inputs or any(i not in done for i in producer.inputs):
        return None
    at = producer.attrs
    if producer.op == "slice" and all(not isinstance(at.get(k), dict) for k in ("start", "end")):
        shape, d = list(done[producer.inputs[0]].shape), at["dim"]
        size, start, end, step = shape[d], at.get("start"), at.get("end"), at.get("step", 1)
        if not symbolic.is_symbolic(size) or not isinstance(step, int) or step < 1:
            return None

        def edge(v, default):
            if v is None:
                return default
            return f"Min({v}, {size})" if v >= 0 else f"Max(0, {size} + ({v}))"
        shape[d] = f"(Max(0, {edge(end, size)} - {edge(start, 0)}) + {step - 1})//{step}"
        return tuple(shape)
    if producer.op == "cat":
        shapes = [list(done[i].shape) for i in producer.inputs]
        d = at["dim"] % len(shapes[0])
        parts = [s[d] for s in shapes]
        if not any(symbolic.is_symbolic(v) for v in parts):
            return None
        return tuple(" + ".join(f"({v})" for v in parts) if k == d else shapes[0][k] for k in range(len(shapes[0])))
    return None


def _unit_dims_moved(producer, program, done, concrete):
    """A reshape that only adds or drops dims of size 1 (an unsqueeze, meshgrid's lines): its
    other dims are its input's, in order. None: not such a reshape."""
    if producer.op not in ("reshape", "repack") or producer.inputs[0] not in done:
        return None
    src = [(c, d) for c, d in zip(program.tensors[producer.inputs[0]].shape, done[producer.inputs[0]].shape) if c != 1]
    if [c for c, _ in src] != [c for c in concrete if c != 1]:
        return None
    rest = iter(d for _, d in src)
    return tuple(1 if c == 1 else next(rest) for c in concrete)


def _shape_attrs(attrs, concrete: tuple, sym: tuple):
    """An attr that lists exactly the output's concrete shape is that shape (reshape, expand,
    repack targets): it becomes the symbolic shape."""
    if concrete == sym:
        return attrs

    def walk(v):
        if isinstance(v, (list, tuple)) and len(v) == len(concrete) and len(v) > 0 \
                and all(isinstance(x, int) and not isinstance(x, bool) for x in v) and tuple(v) == concrete:
            return [symbolic.expr_attr(d) for d in sym]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v
    return walk(attrs)


def export_guards(fakes: list, bounds: dict) -> list[str]:
    """The conditions torch.export traced the model under (its shape env's guards: a branch on
    a size, "h*w != 16" where DINOv2 skips interpolating its position table at its own grid), as
    vkq.symbolic conditions over the program's symbols: Program.checks, refused at run time where
    one fails, as torch's own ep.module() refuses (its _guards_fn, which drop_guards removes).
    A guard that holds throughout the symbols' bounds adds nothing and is left out."""
    import sympy
    env = fakes[0].fake_mode.shape_env
    out = []
    for guard in env.guards:
        expr = env.replace(guard.expr)
        if expr in (sympy.true, True) or not {str(s) for s in expr.free_symbols} <= set(bounds):
            continue
        try:
            text = _condition(expr)
            symbolic.check_condition(text, bounds)
        except symbolic.SymbolicError as e:
            warnings.warn(f"torch.export's guard {expr} is not checked when the program runs ({e})", stacklevel=3)
            continue
        if text not in out and not _holds_throughout(text, bounds):
            out.append(text)
    return out


_RELATIONS = {"==": "Equality", "!=": "Unequality", "<": "StrictLessThan", "<=": "LessThan",
              ">": "StrictGreaterThan", ">=": "GreaterThan"}


def _condition(expr) -> str:
    """A sympy boolean (relations of sizes, And / Or / Not) as a vkq.symbolic condition."""
    import sympy
    kind = type(expr).__name__
    for op, name in _RELATIONS.items():
        if kind == name:
            return f"{expr.lhs} {op} {expr.rhs}"
    if isinstance(expr, (sympy.And, sympy.Or)):
        join = " and " if isinstance(expr, sympy.And) else " or "
        return join.join(f"({_condition(a)})" for a in expr.args)
    if isinstance(expr, sympy.Not):
        return f"not ({_condition(expr.args[0])})"
    raise symbolic.SymbolicError(f"{kind} is not a relation vkq reads")


def _holds_throughout(text: str, bounds: dict, most: int = 4096) -> bool:
    """Whether a condition holds at every binding within the bounds (a range guard; s*w != s
    where w >= 2), tried where there are at most `most` of them."""
    syms = sorted(symbolic.condition_symbols(text))
    count = 1
    for sym in syms:
        count *= bounds[sym][1] - bounds[sym][0] + 1
    if count > most:
        return False
    return all(symbolic.holds(text, dict(zip(syms, values)))
               for values in itertools.product(*(range(bounds[s][0], bounds[s][1] + 1) for s in syms)))


def probe_bindings(bounds: dict, example: dict, checks=()) -> dict:
    """A second shape for verify: every symbol moved off its example value within its bounds
    (+1, or -1 at the top), so that a size the lowering took as a constant shows. Where a check
    fails there (a guard such as "w is a multiple of the window"), the nearest binding that
    moves every symbol up or down by 1 to 8 and satisfies the checks; none: the first."""
    syms = sorted(bounds)
    first = {s: example[s] + 1 if example[s] + 1 <= bounds[s][1] else max(bounds[s][0], example[s] - 1) for s in syms}
    if all(symbolic.holds(c, first) for c in checks):
        return first
    for step in range(1, 9):
        for signs in itertools.islice(itertools.product((1, -1), repeat=len(syms)), 64):
            out = {s: example[s] + sign * step for s, sign in zip(syms, signs)}
            if all(bounds[s][0] <= v <= bounds[s][1] for s, v in out.items()) and \
                    all(symbolic.holds(c, out) for c in checks):
                return out
    return first


def verify(dyn: Program, probe: Program, bindings: dict) -> None:
    """dyn specialized at `bindings` must be exactly `probe` (the graph lowered there)."""
    spec = dyn.specialize(bindings)
    mine, theirs = {n.name: n for n in spec.nodes}, {n.name: n for n in probe.nodes}
    if set(mine) != set(theirs):
        diff = sorted(set(mine) ^ set(theirs))[:4]
        raise DynamicShapeError(f"the lowering makes other nodes at another shape ({', '.join(diff)} ...): "
                                "these dims cannot be dynamic")
    for name, a in mine.items():     # (the order may differ: both are valid orders of one graph)
        b = theirs[name]
        where = f"node {a.name!r} ({a.op})"
        if a.op != b.op:
            raise DynamicShapeError(f"{where} is a {b.op} at another shape: these dims cannot be dynamic")
        if a.inputs != b.inputs or a.outputs != b.outputs:
            raise DynamicShapeError(f"{where} reads or writes other tensors at another shape")
        for k in set(a.attrs) | set(b.attrs):
            if _plain(a.attrs.get(k)) != _plain(b.attrs.get(k)):
                raise DynamicShapeError(f"{where}: its attribute {k!r} depends on the input size "
                                        f"({a.attrs.get(k)!r} at {bindings} should be {b.attrs.get(k)!r}); "
                                        "this op cannot run with dynamic shapes yet")
    for t, s in spec.tensors.items():
        p = probe.tensors.get(t)
        if p is None or (s.shape, s.dtype, s.layout, s.scale, s.zero_point) != \
                (p.shape, p.dtype, p.layout, p.scale, p.zero_point):
            readers = [f"{n.name!r} ({n.op})" for n in spec.nodes if t in n.inputs]
            if t in dyn.constants and readers:   # e.g. take's index map (nearest upsampling, padding, roll)
                raise DynamicShapeError(f"node {readers[0]} reads constant {t!r}, made for one input size "
                                        f"({s.shape} at {bindings} should be {p.shape if p else None}); "
                                        "this op cannot run with dynamic shapes yet")
            raise DynamicShapeError(f"tensor {t!r} is {s} at {bindings}, but lowering there gives {p}")
    for t, v in dyn.constants.items():
        if t not in probe.constants or not np.array_equal(np.asarray(v), np.asarray(probe.constants[t])):
            raise DynamicShapeError(f"constant {t!r} depends on the input size: these dims cannot be dynamic yet")


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    return v
