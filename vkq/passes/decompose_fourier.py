"""decompose_fourier: decompose_ops' rules for Fourier transforms of a real tensor whose real
part, imaginary part or magnitude a model reads (FNet's token mixing, a GFNet filter's input):
real / imag / abs of fft, fft2, fftn, rfft, rfft2, rfftn, or view_as_real of one (and its
selects) -> products with constant cos / sin tables, dim by dim; along a dynamic dim, tables the
graph computes. decompose_ops.DECOMPOSE holds these rules with the others.
"""
from __future__ import annotations

import math

import torch
from torch.fx import Node

from ._graph import SYMBOLIC_SHAPES, arg, aten, call_before, record_symbolic, size_node, val


# Fourier transforms of a real tensor, whose real part, imaginary part or magnitude the model
# reads (FNet's mixing: fftn(x, dim=(1, 2)).real): n / s the sizes themselves, one-sided for rfft*
FOURIER = {aten.fft_fft.default: False, aten.fft_fft2.default: False, aten.fft_fftn.default: False,
           aten.fft_rfft.default: True, aten.fft_rfft2.default: True, aten.fft_rfftn.default: True}
_FOURIER_SCALE = {None: lambda n: 1.0, "backward": lambda n: 1.0, "ortho": lambda n: 1.0 / math.sqrt(n),
                  "forward": lambda n: 1.0 / n}


def _fourier_dims(node, v) -> list | None:
    """The dims an fft op transforms (in torch's order), or None where its sizes (n / s) pad or
    cut the input."""
    if node.target in (aten.fft_fft.default, aten.fft_rfft.default):
        dims, sizes = [arg(node, 2, "dim", -1)], arg(node, 1, "n")
        sizes = None if sizes is None else [sizes]
    else:
        two = node.target in (aten.fft_fft2.default, aten.fft_rfft2.default)
        dims, sizes = arg(node, 2, "dim", [-2, -1] if two else None), arg(node, 1, "s")
        dims = list(range(v.dim())) if dims is None else [dims] if isinstance(dims, int) else list(dims)
    dims = [int(d) % v.dim() for d in dims]
    if sizes is not None and [int(n) for n in sizes] != [v.shape[d] for d in dims]:
        return None
    return dims


def fourier_shape(node, x) -> list | None:
    """The shape of fft op node's complex output on a real x without running its fake kernel
    (whose reshape fixes a dynamic length: vkq.dynamic): x's, the last transformed dim n // 2 + 1
    where one-sided; None where n / s give other sizes."""
    if arg(node, 1, "n" if node.target in (aten.fft_fft.default, aten.fft_rfft.default) else "s") is not None:
        return None
    dims = _fourier_dims(node, x)
    shape = list(x.shape)
    if FOURIER[node.target]:
        shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    return shape


def dft_from_fft(node):
    """real / imag / abs of fft, fft2, fftn, rfft, rfft2, rfftn of a real float tensor (no padding;
    _fourier_part says which) -> the discrete Fourier transform as products with constant cos /
    sin matrices, dim by dim in float32 (re + i im) -> (re C + im S) + i (im C - re S): float
    matmuls on the device where torch's complex FFT would run on the CPU; along a dynamic dim
    the graph computes the matrices from its length. Within float rounding of torch's FFT (a sum
    of N products a term: sqrt(N) roundings)."""
    from ._graph import add_constant
    fft, part = _fourier_part(node)
    if fft is None:
        return None
    x = fft.args[0]
    v = val(x)
    norm = arg(fft, 3, "norm")
    if not isinstance(v, torch.Tensor) or not v.dtype.is_floating_point or v.dim() == 0 \
            or norm not in _FOURIER_SCALE or not all(isinstance(n, int) for n in v.shape):
        return None
    dims = _fourier_dims(fft, v)
    if dims is None or any(v.shape[d] == 0 for d in dims):
        return None
    # symbolic shapes of x and of the nodes made here, where x's is dynamic (their vals hold the
    # example's). x made by a pass has none of its own: the fft's, with a one-sided dim's length
    shapes = node.graph.owning_module.meta.get(SYMBOLIC_SHAPES)
    sym = shapes.get(x.name) if shapes else None
    if not isinstance(sym, tuple) and shapes and isinstance(shapes.get(fft.name), tuple):
        sym = tuple(v.shape[d] if FOURIER[fft.target] and d == dims[-1] else e for d, e in enumerate(shapes[fft.name]))
        if isinstance(shapes[fft.name][dims[-1]], str) and FOURIER[fft.target]:
            return None
        record_symbolic(x, sym)
    sym = list(sym) if isinstance(sym, tuple) and any(isinstance(e, str) for e in sym) else None
    if sym is not None and FOURIER[fft.target] and isinstance(sym[dims[-1]], str):
        return None                 # (a one-sided length n // 2 + 1 of a dynamic n)

    def make(target, args, shape, kwargs=None):
        return record_symbolic(call_before(node, target, args, kwargs), shape if sym is not None else None)
    src = x
    if v.dtype != torch.float32:
        x = make(aten._to_copy.default, (x,), sym, {"dtype": torch.float32})
    re, im = x, None
    for i, d in enumerate(dims):
        n = v.shape[d]
        k = n // 2 + 1 if FOURIER[fft.target] and i == len(dims) - 1 else n     # one-sided: the last dim
        if sym is not None and isinstance(sym[d], str):
            tables = _dynamic_fourier_tables(node, src, d, norm)
        else:
            angle = 2 * math.pi * (torch.arange(n, dtype=torch.float64)[:, None] * torch.arange(k)[None, :] % n) / n
            scale = _FOURIER_SCALE[norm](n)
            tables = {name: add_constant(node.graph.owning_module, f"{node.name}_{name}{i}",
                                         (table(angle) * scale).float(), node)
                      for name, table in (("cos", torch.cos), ("sin", torch.sin))}
        before = after = None
        if sym is not None:
            before = list(sym)
            after = before[:d] + [before[d] if k == n else k] + before[d + 1:]
        swap = (lambda sh: sh[:d] + [sh[-1]] + sh[d + 1:-1] + [sh[d]]) if sym is not None else (lambda sh: sh)

        def times(t, name, d=d, tables=tables, before=before, after=after, swap=swap):   # t's dim d times an (n, k) table
            moved = make(aten.transpose.int, (t, d, -1), swap(before) if before else None)
            product = make(aten.matmul.default, (moved, tables[name]), swap(after) if after else None)
            return make(aten.transpose.int, (product, d, -1), after)
        last = i == len(dims) - 1
        want_re = not last or part != "imag"
        want_im = not last or part != "real"
        new_re = new_im = None
        if want_re:
            new_re = times(re, "cos")
            if im is not None:
                new_re = make(aten.add.Tensor, (new_re, times(im, "sin")), after)
        if want_im:
            new_im = make(aten.neg.default, (times(re, "sin"),), after)
            if im is not None:
                new_im = make(aten.add.Tensor, (times(im, "cos"), new_im), after)
        re, im = new_re, new_im
        sym = after
    if part == "real":
        out = re
    elif part == "imag":
        out = im
    elif part == "both":            # view_as_real: (re, im) in a last dim of 2
        pair = [make(aten.unsqueeze.default, (t, -1), (sym or []) + [1]) for t in (re, im)]
        out = make(aten.cat.default, (pair, -1), (sym or []) + [2])
    else:
        squares = make(aten.add.Tensor, (make(aten.mul.Tensor, (re, re), sym), make(aten.mul.Tensor, (im, im), sym)), sym)
        out = make(aten.sqrt.default, (squares,), sym)
    if val(node).dtype != torch.float32:
        out = call_before(node, aten._to_copy.default, (out,), {"dtype": val(node).dtype})
    return out


def _fourier_part(node) -> tuple:
    """(the fft node, "real" | "imag" | "abs" | "both") of node = real / imag / abs of an fft op's
    output, or of select(view_as_real(fft), -1, 0 or 1), the form of real / imag in a decomposed
    export (FNet's), or view_as_real(fft) itself where other nodes read it; (None, None) otherwise."""
    src = node.args[0] if node.args else None
    part = {aten.real.default: "real", aten.imag.default: "imag", aten.abs.default: "abs"}.get(node.target)
    if node.target == aten.select.int and isinstance(src, Node) and src.target == aten.view_as_real.default \
            and isinstance(val(src), torch.Tensor) and node.args[1] in (-1, val(src).dim() - 1) and node.args[2] in (0, 1, -2, -1):
        src, part = src.args[0], "real" if node.args[2] in (0, -2) else "imag"
    if node.target == aten.view_as_real.default and not all(_fourier_part(u)[0] is src for u in node.users):
        part = "both"               # (read otherwise than by those selects: its quantize, in a static scheme)
    if part is None or not isinstance(src, Node) or src.target not in FOURIER:
        return None, None
    return src, part


def _dynamic_fourier_tables(node, x, d, norm) -> dict:
    """cos / sin (2 pi (j k mod n) / n) for x's dynamic dim d of length n, computed by the graph
    (so one program serves every length): j k and its remainder exact in float32 (n < 4096), the
    angle below 2 pi, so within a few ulp of the float64 tables a static length gets; n itself as
    a tensor, the max of arange(n) plus 1, where arithmetic on sizes would need a number. Each new
    node's symbolic shape is recorded (its val holds the example's length only)."""
    shapes = node.graph.owning_module.meta[SYMBOLIC_SHAPES]
    s = shapes[x.name][d]

    def op(target, args, shape, kwargs=None):
        return record_symbolic(call_before(node, target, args, kwargs), shape)
    j = op(aten.arange.default, (size_node(node, x, d),), (s,), {"dtype": torch.float32})
    jk = op(aten.mul.Tensor, (op(aten.unsqueeze.default, (j, 1), (s, 1)), op(aten.unsqueeze.default, (j, 0), (1, s))),
            (s, s))
    n = op(aten.add.Tensor, (op(aten.amax.default, (j,), ()), 1.0), ())
    step = op(aten.mul.Tensor, (op(aten.reciprocal.default, (n,), ()), 2 * math.pi), ())
    angle = op(aten.mul.Tensor, (op(aten.remainder.Tensor, (jk, n), (s, s)), step), (s, s))
    scale = {"ortho": aten.rsqrt.default, "forward": aten.reciprocal.default}.get(norm)
    tables = {}
    for name, fn in (("cos", aten.cos.default), ("sin", aten.sin.default)):
        t = op(fn, (angle,), (s, s))
        tables[name] = t if scale is None else op(aten.mul.Tensor, (t, op(scale, (n,), ())), (s, s))
    return tables


def complex_abs_or_float(node):
    """abs of a Fourier transform: dft_from_fft; of anything else: stays."""
    return dft_from_fft(node) if val(node.args[0]) is not None and val(node.args[0]).is_complex() else None
