"""decompose_reductions: decompose_ops' rules for reductions and the other ops along a dim that
no kernel runs: max.dim / min.dim and aminmax (amax / amin, argmax / argmin), nansum, prod and
the sum of an integer tensor (the last of a scan), var / std / var_mean / std_mean (two-pass
float ops), logsumexp, histc and bucketize (sums of comparisons), count_nonzero, any / all and
the sum of a bool tensor (of 0/1 floats), vector norms of orders other than 2 and dist, diff
(slices and a sub), cumsum of a float to an integer dtype (a cast first). A module of its own so
that decompose_ops.py stays the table and the pass (it had grown past 800 lines);
decompose_ops.DECOMPOSE holds these rules with the others.
"""
from __future__ import annotations

import math
import operator

import torch
from torch.fx import Node

from ._graph import _made, arg, aten, call_before, dynamic_size, val
from .decompose_indexing import _replace_items
from .decompose_pointwise import _float_in


def _reduction(v, dims) -> tuple[list, list]:
    """A reduction's dims of v (None or [] meaning all, negatives wrapped) and its keepdim shape."""
    dims = [d % v.dim() for d in (dims if isinstance(dims, (list, tuple)) else [dims])] if dims not in (None, []) \
        else list(range(v.dim()))
    return dims, [1 if d in dims else n for d, n in enumerate(v.shape)]


def reductions_from_max_dim(node):
    """max.dim / min.dim(x, d, keepdim) -> (values, indices): the values' getitem becomes
    amax / amin(x, [d], keepdim), the indices' argmax / argmin(x, d, keepdim) (the first extreme,
    as torch's; a NaN counts as the largest in both), each with a kernel (Hiera's pooling:
    x.max(dim).values)."""
    users = list(node.users)
    if not users or not all(u.target is operator.getitem and u.args[1] in (0, 1) for u in users):
        return None
    x, dim = node.args[0], int(node.args[1])
    keepdim = bool(arg(node, 2, "keepdim", False))
    is_max = node.target == aten.max.dim
    for u in users:
        if u.args[1] == 0:
            target, args = (aten.amax.default if is_max else aten.amin.default), (x, [dim], keepdim)
        else:
            target, args = (aten.argmax.default if is_max else aten.argmin.default), (x, dim, keepdim)
        new = call_before(node, target, args)
        new.meta["val"] = val(u)
        u.replace_all_uses_with(new)
        node.graph.erase_node(u)
    return new


def sum_from_nansum(node):
    """nansum(x, dims, keepdim) -> sum(where(x != x, 0, x), dims, keepdim)."""
    if not _float_in(node) or node.kwargs.get("dtype") is not None:
        return None
    x = node.args[0]
    zero = call_before(node, aten.full_like.default, (x, 0.0))
    kept = call_before(node, aten.where.self, (call_before(node, aten.ne.Tensor, (x, x)), zero, x))
    return call_before(node, aten.sum.dim_IntList, (kept, arg(node, 1, "dim", None), bool(arg(node, 2, "keepdim", False))))


def extremes_from_aminmax(node):
    """aminmax(x, dim, keepdim) + getitems -> amin and amax (over everything where dim is None)."""
    x, users = node.args[0], list(node.users)
    if not _float_in(node) or not users or not all(u.target is operator.getitem for u in users):
        return None
    dim, keepdim = node.kwargs.get("dim"), bool(node.kwargs.get("keepdim", False))
    dims = [] if dim is None else [int(dim)]
    parts = {i: call_before(node, aten.amax.default if i == 1 else aten.amin.default, (x, dims, keepdim))
             for i in {u.args[1] for u in users}}
    return _replace_items(node, users, parts)


def counts_from_histc(node):
    """histc(x, bins, min, max), min < max given -> for each bin, the sum of (x >= its lower edge)
    and (x < its upper edge; the last bin's: x <= max) over x: the edges ATen's (linspace(min, max,
    bins + 1) in float32, whose local search puts a value between them so), NaN and values outside
    [min, max] in no bin (a mixture of experts' tokens per expert)."""
    from ._graph import add_constant
    x, bins = node.args[0], int(arg(node, 1, "bins", 100))
    lo, hi = float(arg(node, 2, "min", 0)), float(arg(node, 3, "max", 0))
    if not _float_in(node) or val(x).dtype != torch.float32 or not lo < hi or bins < 1:
        return None
    gm = node.graph.owning_module
    edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float32)
    upper = edges[1:].clone()
    upper[-1] = torch.nextafter(upper[-1], torch.tensor(float("inf")))     # the last bin holds max
    column = call_before(node, aten.unsqueeze.default, (call_before(node, aten.reshape.default, (x, [-1])), -1))
    inside = call_before(node, aten.logical_and.default, (
        call_before(node, aten.ge.Tensor, (column, add_constant(gm, f"{node.name}_lower", edges[:-1].clone(), node))),
        call_before(node, aten.lt.Tensor, (column, add_constant(gm, f"{node.name}_upper", upper, node)))))
    as_float = call_before(node, aten._to_copy.default, (inside,), {"dtype": torch.float32})
    return call_before(node, aten.sum.dim_IntList, (as_float, [0]))


def cast_before_cumsum(node):
    """cumsum(x, dim, dtype=an integer type) of a float x -> cumsum(x cast to it): torch casts the
    input first (a histogram's counts summed to offsets)."""
    dtype = node.kwargs.get("dtype")
    if not _float_in(node) or dtype not in (torch.int32, torch.int64):
        return None
    cast = call_before(node, aten._to_copy.default, (node.args[0],), {"dtype": dtype})
    return call_before(node, aten.cumsum.default, (cast, node.args[1]), {"dtype": dtype})   # (int32 alone sums to int64)


def last_from_prod(node):
    """prod(x[, dim, keepdim]) -> the last of cumprod(x, dim) (over everything: of x flattened), a
    product in the order torch's CPU kernel takes for one dim (the scan kernel runs it)."""
    x = node.args[0]
    v = val(x)
    if not _float_in(node) or v.dim() == 0 or node.kwargs.get("dtype") is not None:
        return None
    if node.target == aten.prod.default:
        flat = call_before(node, aten.reshape.default, (x, [-1]))
        return call_before(node, aten.select.int, (call_before(node, aten.cumprod.default, (flat, 0)), 0, -1))
    dim, keepdim = int(node.args[1]) % v.dim(), bool(arg(node, 2, "keepdim", False))
    if len(node.args) > 3 or not isinstance(v.shape[dim], int) or v.shape[dim] == 0:
        return None
    last = call_before(node, aten.select.int, (call_before(node, aten.cumprod.default, (x, dim)), dim, -1))
    return call_before(node, aten.unsqueeze.default, (last, dim)) if keepdim else last


def sum_from_count_nonzero(node):
    """count_nonzero(x, dims) -> sum(x != 0, dims): int64, as torch's."""
    dims = arg(node, 1, "dim")
    dims = [] if dims is None else [dims] if isinstance(dims, int) else list(dims)
    ne = call_before(node, aten.ne.Scalar, (node.args[0], 0))
    total = call_before(node, aten.sum.dim_IntList, (ne, dims))
    return from_any_all_count(total) or total      # (made after this pass's walk began: rewritten here)


def counts_from_bucketize(node):
    """bucketize(x, boundaries) with constant boundaries -> sum(not(b >= x)) over them (right:
    not(b > x)): the bucket each value falls in, by comparisons (a NaN in the last bucket, as
    torch's binary search puts it)."""
    from .fold_constants import evaluate_constant
    x, b = node.args[:2]
    bounds = evaluate_constant(node.graph.owning_module, b)
    if not isinstance(val(x), torch.Tensor) or bounds is None or bounds.dim() != 1 or not len(bounds):
        return None
    right, out_int32 = bool(arg(node, 3, "right", False)), bool(arg(node, 2, "out_int32", False))
    cmp = aten.gt.Tensor if right else aten.ge.Tensor
    above = call_before(node, cmp, (b, call_before(node, aten.unsqueeze.default, (x, -1))))
    count = call_before(node, aten.sum.dim_IntList, (call_before(node, aten.logical_not.default, (above,)), [-1]))
    count = from_any_all_count(count) or count
    return call_before(node, aten._to_copy.default, (count,), {"dtype": torch.int32}) if out_int32 else count


def moments_from_var_mean(node):
    """var_mean / std_mean(x, dims, correction, keepdim) + getitems -> var (std) and mean of x
    (each rewritten on)."""
    users = list(node.users)
    if not _float_in(node) or not users or not all(u.target is operator.getitem for u in users):
        return None
    x, dims = node.args[0], arg(node, 1, "dim")
    if node.target in (aten.var_mean.dim, aten.std_mean.dim):
        correction, keepdim = (1 if arg(node, 2, "unbiased", True) else 0), bool(arg(node, 3, "keepdim", False))
    else:
        correction, keepdim = node.kwargs.get("correction"), bool(node.kwargs.get("keepdim", False))
        correction = 1 if correction is None else correction
    for u in users:
        if u.args[1] == 0:
            spread = aten.std.correction if node.target in (aten.std_mean.dim, aten.std_mean.correction) \
                else aten.var.correction
            new = call_before(node, spread, (x, dims), {"correction": correction, "keepdim": keepdim})
            new.meta["val"] = val(u)
            new = moments_from_var(new) or new      # (made after this pass's walk began: rewritten here)
        else:
            new = call_before(node, aten.mean.dim, (x, dims, keepdim))
        new.meta["val"] = val(u)
        u.replace_all_uses_with(new)
        node.graph.erase_node(u)
    return new


def sub_from_diff(node):
    """diff(x, 1, dim, prepend, append) -> y[1:] - y[:-1] along dim, y = cat(prepend, x, append)
    (x where neither is given); with a dynamic dim the slices run to the end and to -1 (Whisper's
    int64 positions, transformers' packed-sequence check: a prepend of x[:, :1] - 1)."""
    x, n, dim = node.args[0], arg(node, 1, "n", 1), arg(node, 2, "dim", -1)
    v = val(x)
    extra = [arg(node, 3, "prepend"), arg(node, 4, "append")]
    if n != 1 or not isinstance(v, torch.Tensor) or any(
            e is not None and (not isinstance(e, Node) or not isinstance(val(e), torch.Tensor)
                               or val(e).dim() != v.dim() or val(e).dtype != v.dtype) for e in extra):
        return None
    dim = int(dim) % v.dim()
    y, shape = x, list(v.shape)
    if any(e is not None for e in extra):
        parts = [e for e in (extra[0], x, extra[1]) if e is not None]
        shape[dim] = sum(int(val(e).shape[dim]) for e in parts)
        y = _made(node, aten.cat.default, (parts, dim), shape, v.dtype)
    size = shape[dim]
    dynamic = dynamic_size(x) or any(e is not None and dynamic_size(e) for e in extra)
    later = _made(node, aten.slice.Tensor, (y, dim, 1, None if dynamic else size), val(node).shape, v.dtype)
    earlier = _made(node, aten.slice.Tensor, (y, dim, 0, -1 if dynamic else size - 1), val(node).shape, v.dtype)
    return call_before(node, aten.sub.Tensor, (later, earlier))


def from_any_all_count(node):
    """any / all of a tensor (over dims or all of it) -> amax / amin of it as 0/1 floats, != 0; a
    sum of a bool tensor (a count) -> the sum of 0/1 floats as int64 (exact to 2^24)."""
    x = node.args[0]
    v = val(x)
    if not isinstance(v, torch.Tensor) or (node.target == aten.sum.dim_IntList and v.dtype != torch.bool):
        return None
    dims = arg(node, 1, "dim") if node.target != aten.all.default and node.target != aten.any.default else None
    dims = None if dims is None else ([int(dims)] if isinstance(dims, int) else [int(d) for d in dims])
    keepdim = bool(arg(node, 2, "keepdim", False)) if dims is not None else False
    nonzero = x if v.dtype == torch.bool else call_before(node, aten.ne.Scalar, (x, 0))
    ones = call_before(node, aten._to_copy.default, (nonzero,), {"dtype": torch.float32})
    if node.target == aten.sum.dim_IntList:
        total = call_before(node, aten.sum.dim_IntList, (ones, dims, keepdim))
        return call_before(node, aten._to_copy.default, (total,), {"dtype": val(node).dtype})
    reduce = aten.amax.default if node.target in (aten.any.dim, aten.any.dims, aten.any.default) else aten.amin.default
    picked = call_before(node, reduce, (ones, dims if dims is not None else list(range(v.dim())), keepdim))
    return call_before(node, aten.ne.Scalar, (picked, 0.0))


def from_logsumexp(node):
    """logsumexp as ATen computes it: m = amax(x, dims) (0 where m is infinite, so that an
    all -inf row gives -inf, not NaN), log(sum(exp(x - m))) + m. Float ops with kernels."""
    x, v = node.args[0], val(node.args[0])
    if not isinstance(v, torch.Tensor) or not v.is_floating_point() or not all(isinstance(d, int) for d in v.shape):
        return None
    dims, kept = _reduction(v, arg(node, 1, "dim"))
    full, f = list(v.shape), v.dtype
    m = _made(node, aten.amax.default, (x, dims, True), kept, f)
    inf = _made(node, aten.eq.Scalar, (_made(node, aten.abs.default, (m,), kept, f), float("inf")), kept, torch.bool)
    m = _made(node, aten.where.ScalarSelf, (inf, 0.0, m), kept, f)
    e = _made(node, aten.exp.default, (_made(node, aten.sub.Tensor, (x, m), full, f),), full, f)
    total = _made(node, aten.sum.dim_IntList, (e, dims, True), kept, f)
    out = _made(node, aten.add.Tensor, (_made(node, aten.log.default, (total,), kept, f), m), kept, f)
    if arg(node, 2, "keepdim", False):
        return out
    dropped = [n for d, n in enumerate(v.shape) if d not in dims]
    return _made(node, aten.reshape.default, (out, dropped), dropped, f)


def moments_from_var(node):
    """var / std as the two-pass float ops that compute them: mean, subtract, square, sum, divide
    by n - correction (and sqrt). Not before annotation: those ops must stay float, not int8."""
    x, v = node.args[0], val(node.args[0])
    if not isinstance(v, torch.Tensor) or not v.is_floating_point() or not all(isinstance(d, int) for d in v.shape):
        return None
    if node.target in (aten.var.dim, aten.std.dim):
        dims, correction = arg(node, 1, "dim"), 1 if arg(node, 2, "unbiased", True) else 0
        keepdim = arg(node, 3, "keepdim", False)
    else:
        dims, correction, keepdim = arg(node, 1, "dim"), node.kwargs.get("correction"), node.kwargs.get("keepdim", False)
        correction = 1 if correction is None else correction
    dims, kept = _reduction(v, dims)
    n = math.prod(v.shape[d] for d in dims)
    if n - correction <= 0:
        return None         # (torch's inf / nan there: left to it)
    full, f = list(v.shape), v.dtype
    out = kept if keepdim else [s for d, s in enumerate(v.shape) if d not in dims]
    d = _made(node, aten.sub.Tensor, (x, _made(node, aten.mean.dim, (x, dims, True), kept, f)), full, f)
    total = _made(node, aten.sum.dim_IntList, (_made(node, aten.mul.Tensor, (d, d), full, f), dims, keepdim), out, f)
    var = _made(node, aten.div.Tensor, (total, float(n - correction)), out, f)
    return _made(node, aten.sqrt.default, (var,), out, f) if node.target in (aten.std.dim, aten.std.correction) else var


def count_or_int_sum(node):
    """sum of a bool tensor: from_any_all_count; of an integer one: last_from_int_sum."""
    return from_any_all_count(node) or last_from_int_sum(node)


def last_from_int_sum(node):
    """sum(x, dim) of an integer x (int64 counts: a one-hot's, a mask's row lengths) -> the last
    of cumsum(x, dim): integer additions (the scan kernel's), exact as torch's wherever the
    values fit in 32 bits. One dim, or all (x flattened)."""
    x = node.args[0]
    v, out = val(x), val(node)
    if not isinstance(v, torch.Tensor) or v.dtype not in (torch.int32, torch.int64) or v.dim() == 0 \
            or out.dtype not in (torch.int32, torch.int64) or node.kwargs.get("dtype") not in (None, out.dtype):
        return None
    dims = arg(node, 1, "dim")
    dims = [] if dims is None else ([int(dims)] if isinstance(dims, int) else [int(d) % v.dim() for d in dims])
    keepdim = bool(arg(node, 2, "keepdim", False))
    if len(dims) > 1 or (keepdim and not dims) or dynamic_size(x):
        return None
    if not dims:
        x, dim = call_before(node, aten.reshape.default, (x, [-1])), 0
    else:
        dim = dims[0]
    if not isinstance(val(x).shape[dim], int) or val(x).shape[dim] == 0:
        return None
    total = call_before(node, aten.cumsum.default, (x, dim), {"dtype": out.dtype})
    last = call_before(node, aten.select.int, (total, dim, -1))
    return call_before(node, aten.unsqueeze.default, (last, dim)) if keepdim else last


def sums_from_vector_norm(node):
    """linalg_vector_norm(x, ord, dims, keepdim) of a float x, ord not 2 (the kernel's) -> ATen's
    reductions of |x|: ord 1 a sum, inf / -inf an amax / amin, 0 a count of nonzeros, another p
    sum(|x|^p)^(1/p) (F.normalize(p=1), x.norm(p=1)); dist(x, y, p): the norm of x - y."""
    if node.target == aten.dist.default:
        x = call_before(node, aten.sub.Tensor, (node.args[0], node.args[1]))
        ord_, dims, keepdim = float(arg(node, 2, "p", 2)), None, False
    else:
        x, ord_ = node.args[0], float(arg(node, 1, "ord", 2))
        dims, keepdim = arg(node, 2, "dim"), bool(arg(node, 3, "keepdim", False))
    v = val(x)
    if not isinstance(v, torch.Tensor) or not v.dtype.is_floating_point or node.kwargs.get("dtype") is not None \
            or (ord_ == 2 and node.target != aten.dist.default):
        return None
    dims = list(range(v.dim())) if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0) \
        else [int(dims)] if isinstance(dims, int) else [int(d) for d in dims]
    if ord_ == 2:
        return call_before(node, aten.linalg_vector_norm.default, (x, 2, dims, keepdim))
    size = call_before(node, aten.abs.default, (x,))
    if math.isinf(ord_):
        return call_before(node, aten.amax.default if ord_ > 0 else aten.amin.default, (size, dims, keepdim))
    if ord_ == 0:
        nonzero = call_before(node, aten._to_copy.default, (call_before(node, aten.ne.Scalar, (x, 0)),),
                              {"dtype": v.dtype})
        return call_before(node, aten.sum.dim_IntList, (nonzero, dims, keepdim))
    if ord_ == 1:
        return call_before(node, aten.sum.dim_IntList, (size, dims, keepdim))
    powered = call_before(node, aten.pow.Tensor_Scalar, (size, ord_))
    return call_before(node, aten.pow.Tensor_Scalar,
                       (call_before(node, aten.sum.dim_IntList, (powered, dims, keepdim)), 1.0 / ord_))
