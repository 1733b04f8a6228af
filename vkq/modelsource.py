"""Where `vkq compile` gets a model and its example inputs:

  model.pt2                a torch.export.save'd ExportedProgram (PyTorch's exchange format):
                           its .module() and the example inputs saved with it (or --input-shape);
                           exported with dynamic dims, its Dims and their bounds (one program for
                           every shape within them) unless static=True
  package.module:function  (or path/to/file.py:function) a function returning (model, example_inputs)
                           or (model, example_inputs, dynamic_shapes) (torch.export's)

Anything unusable is refused with a ModelSourceError saying what to give instead.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

import torch


class ModelSourceError(ValueError):
    """MODEL names no usable model, and why."""


def load_model(source: str, input_shapes=None, static: bool = False) -> tuple:
    """(nn.Module, example inputs tuple, dynamic_shapes or None). input_shapes: a list of
    shapes, one per input, used for a .pt2 saved without example inputs, or instead of a
    function's example inputs; static: the example shapes only (no dynamic_shapes)."""
    path = Path(source)
    if path.is_file() or path.suffix.lower() == ".pt2":
        model, examples, dims = _load_pt2(path, input_shapes, static)
    elif ":" in source:
        model, examples, dims = _load_function(source, input_shapes)
    else:
        raise ModelSourceError(f"{source}: no such file (MODEL is a torch.export.save'd .pt2 file, "
                               "or package.module:function returning (model, example_inputs))")
    return model, examples, None if static else dims


def _load_pt2(path: Path, input_shapes, static: bool):
    if not path.is_file():
        raise ModelSourceError(f"{path}: no such file")
    if path.suffix.lower() != ".pt2":
        hint = {".pt": "a torch.save'd model? ", ".pth": "a torch.save'd model? ", ".onnx": "an ONNX model? "}
        raise ModelSourceError(f"{path}: not a .pt2 file ({hint.get(path.suffix.lower(), '')}export the model with "
                               "torch.export.export and save it with torch.export.save, or give "
                               "package.module:function)")
    try:
        ep = torch.export.load(str(path))
    except Exception as e:       # torch raises many kinds for a file that is not its format
        raise ModelSourceError(f"{path}: not a torch.export.save'd program ({type(e).__name__}: {e})") from None
    inputs = _user_inputs(ep)
    saved = ep.example_inputs
    if saved is not None and saved[1]:
        raise ModelSourceError(f"{path}: the program takes keyword inputs ({', '.join(saved[1])}); "
                               "vkq compiles models called with positional inputs")
    if input_shapes:
        examples = _examples_for(input_shapes, [dtype for _, dtype in inputs], path)
        wrong = _outside(ep, inputs, examples)
        if wrong:
            raise ModelSourceError(f"{path}: exported for inputs of shapes {_shown(ep, inputs)}; --input-shape gives "
                                   f"{[list(t.shape) for t in examples]} ({wrong})")
    elif saved is not None:
        examples = tuple(saved[0])
    else:
        described = ", ".join(f"{_shown(ep, [(shape, dtype)])[0]} {str(dtype).replace('torch.', '')}"
                              for shape, dtype in inputs)
        raise ModelSourceError(f"{path}: saved without example inputs; give --input-shape once per input "
                               f"(the program's inputs: {described})")
    gm = ep.module()
    if _has_training_ops(gm):     # exported from a model in .train(): dropout and batch norm as in eval
        from torchao.quantization.pt2e import move_exported_model_to_eval
        gm = move_exported_model_to_eval(gm)
    gm.eval = types.MethodType(lambda self: self, gm)  # so quantize's .eval() (refused by exported modules) is a no-op
    return gm, examples, None if static else _saved_dims(ep, path)


def _shown(ep, inputs) -> list:
    """The saved inputs' shapes, a dynamic dim as its range ("1..8")."""
    return [[int(d) if not isinstance(d, torch.SymInt) or d.node.expr.is_number else "{}..{}".format(*_range(ep, d))
             for d in shape] for shape, _ in inputs]


def _range(ep, d) -> tuple:
    """(min, max or None) of a saved dynamic dim (a plain symbol; else (None, None))."""
    vr = ep.range_constraints.get(d.node.expr)
    if vr is None:
        return None, None
    return int(vr.lower), None if str(vr.upper) in ("oo", "int_oo") else int(vr.upper)


def _outside(ep, inputs, examples) -> str | None:
    """Why example tensors do not fit the saved program's inputs (a static dim differs, a
    dynamic one is outside its range), or None."""
    if len(examples) != len(inputs):
        return f"{len(examples)} shapes for {len(inputs)} inputs"
    for k, ((shape, _), t) in enumerate(zip(inputs, examples)):
        if len(shape) != t.dim():
            return f"input {k} has {len(shape)} dims"
        for i, (d, got) in enumerate(zip(shape, t.shape)):
            if not isinstance(d, torch.SymInt) or d.node.expr.is_number:
                if int(d) != got:
                    return f"input {k} dim {i} is {int(d)}"
                continue
            lo, hi = _range(ep, d)
            if lo is None or got < lo or (hi is not None and got > hi):
                return f"input {k} dim {i} is dynamic in {lo}..{hi}"
    return None


def _saved_dims(ep, path: Path):
    """torch.export's dynamic_shapes rebuilt from a saved program's symbolic input dims and its
    range_constraints (a plain symbol: a Dim named after its first input and dimension; a*s + b:
    that Dim's derived dim), or None where every dim is static. A dim with no upper bound, or an
    expression of another form, is refused: vkq sizes its buffers for the largest shape."""
    import sympy
    names = set(ep.graph_signature.user_inputs)
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in names]
    roots, specs = {}, []

    def root(sym, name, where):
        if sym not in roots:
            vr = ep.range_constraints.get(sym)
            hi = getattr(vr, "upper", None)
            if vr is None or str(hi) in ("oo", "int_oo") or not getattr(hi, "is_Integer", False):
                raise ModelSourceError(f"{path}: {where} is dynamic with no upper bound ({sym} in {vr}); export it "
                                       "with torch.export.Dim(..., max=N) (vkq sizes its buffers for the largest "
                                       "shape), or give --static to compile the example shapes only")
            roots[sym] = torch.export.Dim(name, min=int(vr.lower), max=int(hi))
        return roots[sym]

    for n in placeholders:
        spec = {}
        for i, d in enumerate(getattr(n.meta.get("val"), "shape", ())):
            expr = d.node.expr if isinstance(d, torch.SymInt) else None
            if expr is None or expr.is_number:
                continue
            where = f"input {n.name!r} dim{i}"
            free = sorted(expr.free_symbols, key=str)
            a = expr.coeff(free[0]) if len(free) == 1 else None
            b = expr.subs(free[0], 0) if len(free) == 1 else None
            linear = len(free) == 1 and a.is_Integer and b.is_Integer and a > 0
            if not (linear and sympy.expand(a * free[0] + b - expr) == 0):
                raise ModelSourceError(f"{path}: {where} is {expr}, not a Dim or a * Dim + b that vkq can rebuild; "
                                       "give --static to compile the example shapes only")
            dim = root(free[0], f"{n.name}_dim{i}" if expr == free[0] else str(free[0]), where)
            spec[i] = dim if expr == free[0] else dim * int(a) + int(b)
        specs.append(spec or None)
    return tuple(specs) if any(specs) else None


def _has_training_ops(gm) -> bool:
    """Any op called with training=True / train=True (batch norm, dropout)."""
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        for i, arg in enumerate(schema.arguments):
            if arg.name in ("training", "train"):
                value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name, arg.default_value)
                if value is True:
                    return True
    return False


def _user_inputs(ep) -> list:
    """(shape, dtype) of each user input of an ExportedProgram, from its placeholders."""
    names = set(ep.graph_signature.user_inputs)
    out = []
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in names:
            val = node.meta.get("val")
            out.append((tuple(getattr(val, "shape", ())), getattr(val, "dtype", torch.float32)))
    return out


def _examples_for(shapes, dtypes, where) -> tuple:
    """Example tensors of these shapes: float inputs random normal (seeded), integer ones 0."""
    if dtypes and len(shapes) != len(dtypes):
        raise ModelSourceError(f"{where}: the model takes {len(dtypes)} input(s); --input-shape was given "
                               f"{len(shapes)} time(s)")
    gen = torch.Generator().manual_seed(0)
    out = []
    for shape, dtype in zip(shapes, list(dtypes) + [torch.float32] * len(shapes)):
        if dtype.is_floating_point:
            out.append(torch.randn(*shape, generator=gen).to(dtype))
        else:
            out.append(torch.zeros(*shape, dtype=dtype))
    return tuple(out)


def _load_function(source: str, input_shapes):
    result = import_function(source)()
    if not (isinstance(result, (tuple, list)) and len(result) in (2, 3) and isinstance(result[0], torch.nn.Module)):
        raise ModelSourceError(f"{source}: must return (model, example_inputs) or (model, example_inputs, "
                               f"dynamic_shapes), got {type(result).__name__}")
    model, examples, dims = (*result, None)[:3]
    examples = tuple(examples) if isinstance(examples, (tuple, list)) else (examples,)
    if not all(isinstance(t, torch.Tensor) for t in examples):
        raise ModelSourceError(f"{source}: example_inputs must be a tensor or a tuple of tensors")
    if input_shapes:
        examples = _examples_for(input_shapes, [t.dtype for t in examples], source)
    return model, examples, dims


def import_function(source: str):
    """The function named by package.module:function or path/to/file.py:function."""
    module_name, _, fn_name = source.rpartition(":")
    if not module_name or not fn_name.isidentifier():
        raise ModelSourceError(f"{source}: expected package.module:function or path/to/file.py:function")
    try:
        if module_name.endswith(".py"):
            if not Path(module_name).is_file():
                raise ModelSourceError(f"{module_name}: no such file")
            spec = importlib.util.spec_from_file_location(Path(module_name).stem, module_name)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path and "" not in sys.path:   # as `python -m` would: modules here
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except ImportError as e:
        raise ModelSourceError(f"{source}: cannot import {module_name} ({e})") from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ModelSourceError(f"{source}: {module_name} has no function {fn_name!r}")
    return fn
