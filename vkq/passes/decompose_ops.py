"""decompose_ops: ATen ops that no kernel runs as they are, rewritten into the few ops ATen
itself computes them with, each of which has a kernel. It runs after fold_qdq_patterns: an op
between a dequantize and a quantize has become an int8 op there (selu, threshold, frac, ... a
lookup table), so only what is left in float is rewritten here:

  aten.max.dim / min.dim (values, indices) + getitems -> amax / amin and argmax / argmin
  aten.one_hot(ids, n)                          -> eq(unsqueeze(ids, -1), arange(n)) as int64
  aten.scatter(x, dim, index, value), one index along dim (a one-hot of an argmax)
                                                -> where(index == arange along dim, value, x)
  aten.clamp.Tensor(x, min, max) (tensor bounds) -> minimum(maximum(x, min), max)
  clamp / hardtanh / relu of an integer tensor (ids clamped into a table) -> maximum / minimum
                                                  by 0-d constants (int32 word ops)
  float threshold, hardshrink, softshrink, selu, celu, rrelu (eval), log_sigmoid, heaviside, frac,
  isnan, nan_to_num, lerp, addcdiv, var_mean / std_mean, diff (n = 1; prepend / append: a cat), sinc,
  xlogy, count_nonzero (a sum of x != 0), bucketize by constant boundaries (counts of comparisons),
  sgn, deg2rad / rad2deg, nansum, logaddexp(2)
  aten.prod(x[, dim, keepdim]), float          -> select(cumprod(x, dim), dim, -1) (flattened: over all)
  aten.aminmax(x, dim, keepdim) + getitems     -> amin, amax
  aten.histc(x, bins, min, max), float, min < max -> sums of comparisons with ATen's bin edges
  aten.cumsum(x, dim, dtype=int32/int64) of a float x -> cumsum of x cast to dtype (torch's order)
  aten.sum(x[, dim]) of an integer x            -> the last of cumsum(x, dim) (integer additions)
  aten.kthvalue(x, k, dim) / median(x[, dim]) + getitems -> the (k-1)-th / middle of a stable argsort
                                                  and the values gathered by it (median NaN where
                                                  its row holds one, as torch's; nanmedian the
                                                  middle of the row's numbers)
  round(x, decimals), logit(x, eps), fmax / fmin, ldexp, logical and / or / xor of non-bools
                                                -> ATen's formulas (mul / round / div; clamp, div,
                                                  log; where of NaN tests; mul by pow(2, e); != 0)
  masked_scatter(x, mask, source)              -> where(mask, source flattened indexed by the mask's
                                                  running count - 1, x) (a VLM's image features into
                                                  its token embeddings)
  signbit(x)                                    -> x < 0; a float 0 by the sign of 1 / x
  linalg_vector_norm(x, ord != 2), dist(x, y, p) -> sum / amax / amin / count of |x|, or sum(|x|^p)^(1/p)
  real / imag / abs of fft, fft2, fftn, rfft, rfft2, rfftn of a real tensor (FNet's token mixing),
  or view_as_real of one (and its selects)     -> products with constant cos / sin tables, dim by dim;
                                                  along a dynamic dim tables the graph computes
                                                  (those rules: decompose_fourier.py)
                                                -> where, compares, elu, softplus, trunc, ... as ATen
                                                  computes them (its comparisons: a NaN stays NaN)
  aten.topk(x, k <= 8, dim, largest) + getitems -> k rounds of argmax, gather and a where; a larger k
                                                  (or a dynamic dim): the first k of a stable argsort
  aten.sort(x, dim, descending) + getitems     -> argsort (stable) and a gather of the values by it
  aten.meshgrid(1-D tensors, indexing) + getitems -> each a view along its dim, expanded (a grid of
                                                  aranges of dynamic lengths: static ones fold)
  cosine_similarity, pairwise_distance (p = 2) -> norms, divisions, a sum (ATen's formulas)
  cdist (p = 2)                                 -> ATen's: a matmul of padded operands (> 25 rows), else
                                                  the norms of the differences
  any / all (a max / min of 0/1 floats), the sum of a bool tensor (of 0/1 floats, as int64)
  add / sub / mul / div / maximum / minimum of a float and an integer tensor, the true division
  of integers                                   -> the integer ones cast first (torch's type promotion)
  aten.logsumexp(x, dims, keepdim), float, static shapes
                                                -> m + log(sum(exp(x - m))), m = amax (0 where infinite), as ATen
  aten.bilinear(x1, x2, w, b) (nn.Bilinear), float -> x1 (outer) x2 flattened @ (w as (O, I*J))^T + b
  aten.affine_grid_generator(theta, [N, C, H, W], align_corners), static size (a spatial transformer)
                                                -> bmm(base grid (N, H*W, 3), theta^T) viewed (N, H, W, 2):
                                                  ATen's own computation, the base grid a constant
  aten.var / aten.std (dim or correction form), float, static shapes
                                                -> sum((x - mean(x))^2) / (n - correction) [sqrt]: float ops
                                                  with kernels (a hand-written layer norm's x.std(-1))

Rules are the table DECOMPOSE: target -> function(node) returning the replacement node or None
(the node stays, and runs on the CPU if nothing else takes it).
"""
from __future__ import annotations

import math
import operator

import torch
from torch.fx import GraphModule, Node

from ._graph import SHAPE_OF, _made, arg, aten, call_before, dynamic_size, finish, val
from .decompose_fourier import complex_abs_or_float, dft_from_fft


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


def _iota(node, n, rank, dim):
    """arange(n) (int64) viewed along `dim` of a rank-`rank` shape, 1 elsewhere."""
    shape = [1] * rank
    shape[dim] = n
    return call_before(node, aten.view.default, (call_before(node, aten.arange.default, (n,), {"dtype": torch.int64}), shape))


def eq_from_one_hot(node):
    """one_hot(ids, n), n given -> eq(unsqueeze(ids, -1), arange(n)) as int64: kernels for the
    compare, the arange and the cast (a class count read from the data, n = -1, stays)."""
    ids, n = node.args[0], int(arg(node, 1, "num_classes", -1))
    v = val(ids)
    if n <= 0 or not isinstance(v, torch.Tensor):
        return None
    column = call_before(node, aten.unsqueeze.default, (ids, -1))
    hits = call_before(node, aten.eq.Tensor, (column, _iota(node, n, v.dim() + 1, v.dim())))
    return call_before(node, aten._to_copy.default, (hits,), {"dtype": torch.int64})


def where_from_scatter(node):
    """scatter(x, dim, index, value) with one index along dim (index's other sizes x's: a
    one-hot of an argmax, Gumbel-softmax's hard sample) -> where(index == arange along dim,
    value, x): each position is written at most once, so the same values as torch's scatter."""
    x, dim, index, value = node.args[:4]
    vx, vi = val(x), val(index)
    if not isinstance(value, (int, float)) or not isinstance(vx, torch.Tensor) or not isinstance(vi, torch.Tensor) \
            or vx.dim() != vi.dim() or node.kwargs.get("reduce") is not None:
        return None
    dim = int(dim) % vx.dim()
    same = all(str(a) == str(b) for d, (a, b) in enumerate(zip(vx.shape, vi.shape)) if d != dim)
    if not same or str(vi.shape[dim]) != "1" or not isinstance(vx.shape[dim], int) or dynamic_size(x, [dim]):
        return None
    hits = call_before(node, aten.eq.Tensor, (index, _iota(node, vx.shape[dim], vx.dim(), dim)))
    return call_before(node, aten.where.ScalarSelf, (hits, value, x))


def extremes_from_clamp(node):
    """clamp(x, min, max) with tensor bounds -> minimum(maximum(x, min), max) (either optional),
    the order torch's clamp applies them in."""
    x, lo, hi = node.args[0], arg(node, 1, "min"), arg(node, 2, "max")
    out = x
    for target, bound in ((aten.maximum.default, lo), (aten.minimum.default, hi)):
        if isinstance(bound, Node):
            out = call_before(node, target, (out, bound))
    return out if out is not x else None


def _float_in(node) -> bool:
    v = val(node.args[0])
    return isinstance(v, torch.Tensor) and v.dtype.is_floating_point


def where_from_threshold(node):
    """threshold(x, th, v) -> where(x <= th, v, x) (a NaN stays NaN, as ATen's)."""
    if not _float_in(node):
        return None
    x, th, v = node.args[:3]
    return call_before(node, aten.where.ScalarSelf, (call_before(node, aten.le.Scalar, (x, th)), v, x))


def where_from_shrink(node):
    """hardshrink(x, l) -> where(|x| <= l, 0, x); softshrink(x, l) -> where(x > l, x - l,
    where(x < -l, x + l, x * 0)): ATen's comparisons, so a NaN stays NaN."""
    if not _float_in(node):
        return None
    x, lam = node.args[0], float(arg(node, 1, "lambd", 0.5))
    if node.target == aten.hardshrink.default:
        small = call_before(node, aten.le.Scalar, (call_before(node, aten.abs.default, (x,)), lam))
        return call_before(node, aten.where.ScalarSelf, (small, 0.0, x))
    inner = call_before(node, aten.where.self, (call_before(node, aten.lt.Scalar, (x, -lam)), call_before(node, aten.add.Tensor, (x, lam)),
                                         call_before(node, aten.mul.Tensor, (x, 0.0))))
    return call_before(node, aten.where.self, (call_before(node, aten.gt.Scalar, (x, lam)), call_before(node, aten.sub.Tensor, (x, lam)),
                                        inner))


def elu_from_celu_selu(node):
    """selu(x) -> elu(x, 1.6732632423543772) * 1.0507009873554805 and celu(x, a) -> where(x > 0,
    x, elu(x * (1 / a), a)): ATen's elu with its scale / input_scale, on the plain elu kernel."""
    if not _float_in(node):
        return None
    x = node.args[0]
    if node.target == aten.selu.default:
        return call_before(node, aten.mul.Tensor, (call_before(node, aten.elu.default, (x, 1.6732632423543772)), 1.0507009873554805))
    a = float(arg(node, 1, "alpha", 1.0))
    if a == 0:
        return None
    neg = call_before(node, aten.elu.default, (call_before(node, aten.mul.Tensor, (x, 1.0 / a)), a))
    return call_before(node, aten.where.self, (call_before(node, aten.gt.Scalar, (x, 0.0)), x, neg))


def leaky_relu_from_rrelu(node):
    """rrelu at inference (training False): leaky_relu with the mean slope (lower + upper) / 2."""
    if arg(node, 3, "training", False) or not _float_in(node):
        return None
    lower, upper = float(arg(node, 1, "lower", 1 / 8)), float(arg(node, 2, "upper", 1 / 3))
    return call_before(node, aten.leaky_relu.default, (node.args[0], (lower + upper) / 2))


def softplus_from_log_sigmoid(node):
    """log_sigmoid(x) -> -softplus(-x) (softplus's threshold 20 keeps x for x < -20)."""
    if not _float_in(node):
        return None
    neg = call_before(node, aten.neg.default, (node.args[0],))
    return call_before(node, aten.neg.default, (call_before(node, aten.softplus.default, (neg, 1.0, 20.0)),))


def where_from_heaviside(node):
    """heaviside(x, v) -> where(x == 0, v, where(x > 0, 1, 0))."""
    if not _float_in(node):
        return None
    x, v = node.args[:2]
    step = call_before(node, aten.where.Scalar, (call_before(node, aten.gt.Scalar, (x, 0.0)), 1.0, 0.0))
    return call_before(node, aten.where.self, (call_before(node, aten.eq.Scalar, (x, 0.0)), v, step))


def from_sinc(node):
    """sinc(x) -> where(x == 0, 1, sin(pi x) / (pi x)), as ATen computes it (SincNet's filters)."""
    if not _float_in(node):
        return None
    x = node.args[0]
    p = call_before(node, aten.mul.Tensor, (x, math.pi))
    ratio = call_before(node, aten.div.Tensor, (call_before(node, aten.sin.default, (p,)), p))
    return call_before(node, aten.where.self, (call_before(node, aten.eq.Scalar, (x, 0.0)),
                                               call_before(node, aten.full_like.default, (x, 1.0)), ratio))


def _replace_items(node, users, parts):
    """Each getitem user of a tuple-valued node replaced by parts[its index]; the last one returned."""
    for u in users:
        new = parts[u.args[1]]
        new.meta["val"] = val(u)
        u.replace_all_uses_with(new)
        node.graph.erase_node(u)
    return new


def sign_from_sgn(node):
    """sgn(x) of a real x -> sign(x)."""
    return call_before(node, aten.sign.default, (node.args[0],)) if _float_in(node) else None


def mul_from_angle(node):
    """deg2rad / rad2deg(x) -> x * (pi / 180) / x * (180 / pi): ATen's product by the constant
    as a float32 scalar (bit for bit)."""
    if not _float_in(node):
        return None
    k = math.pi / 180 if node.target == aten.deg2rad.default else 180 / math.pi
    return call_before(node, aten.mul.Tensor, (node.args[0], k))


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


def from_logaddexp(node):
    """logaddexp(a, b) -> where(a == b and |a| = inf, a, max(a, b) + log1p(exp(-|a - b|))), as
    ATen (logaddexp2: exp2, and log1p(.) / ln 2)."""
    a, b = node.args[:2]
    if not _float_in(node) or not isinstance(b, Node) or not isinstance(val(b), torch.Tensor) \
            or val(b).dtype != val(a).dtype:
        return None
    two = node.target == aten.logaddexp2.default
    d = call_before(node, aten.neg.default, (call_before(node, aten.abs.default,
                                                         (call_before(node, aten.sub.Tensor, (a, b)),)),))
    t = call_before(node, aten.log1p.default, (call_before(node, aten.exp2.default if two else aten.exp.default, (d,)),))
    t = call_before(node, aten.mul.Tensor, (t, 1 / math.log(2))) if two else t
    r = call_before(node, aten.add.Tensor, (call_before(node, aten.maximum.default, (a, b)), t))
    same_inf = call_before(node, aten.logical_and.default, (
        call_before(node, aten.eq.Tensor, (a, b)),
        call_before(node, aten.eq.Scalar, (call_before(node, aten.abs.default, (a,)), math.inf))))
    return call_before(node, aten.where.self, (same_inf, a, r))


def from_xlogy(node):
    """xlogy(x, y) -> NaN where y is, else 0 where x == 0, else x log(y), as ATen (entropies)."""
    x, y = node.args[:2]
    if not _float_in(node) or not isinstance(y, Node) or not isinstance(val(y), torch.Tensor) \
            or val(y).dtype != val(x).dtype or tuple(val(node).shape) != tuple(val(x).shape):
        return None
    product = call_before(node, aten.mul.Tensor, (x, call_before(node, aten.log.default, (y,))))
    zero = call_before(node, aten.where.self, (call_before(node, aten.eq.Scalar, (x, 0.0)),
                                              call_before(node, aten.full_like.default, (x, 0.0)), product))
    return call_before(node, aten.where.self, (call_before(node, aten.ne.Tensor, (y, y)), y, zero))


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


def sub_from_frac(node):
    """frac(x) -> x - trunc(x) (exact, as ATen)."""
    if not _float_in(node):
        return None
    return call_before(node, aten.sub.Tensor, (node.args[0], call_before(node, aten.trunc.default, (node.args[0],))))


def ne_from_isnan(node):
    """isnan(x) -> x != x."""
    return call_before(node, aten.ne.Tensor, (node.args[0], node.args[0])) if _float_in(node) else None


def where_from_nan_to_num(node):
    """nan_to_num(x, nan, posinf, neginf) -> where(x != x, nan, y): y = clamp(x, float32's extremes)
    with the infinities' defaults; a value given for one: where(x == +-inf, it, x) (a clamp to
    it would move the finite values past it too)."""
    if not _float_in(node) or val(node).dtype != torch.float32:
        return None
    x = node.args[0]
    big = float(torch.finfo(torch.float32).max)
    nan, posinf, neginf = (arg(node, i, k) for i, k in ((1, "nan"), (2, "posinf"), (3, "neginf")))
    if posinf is None and neginf is None:
        y = call_before(node, aten.clamp.default, (x, -big, big))
    else:
        y = x
        for inf, value in ((math.inf, big if posinf is None else posinf), (-math.inf, -big if neginf is None else neginf)):
            y = call_before(node, aten.where.ScalarSelf, (call_before(node, aten.eq.Scalar, (x, inf)), float(value), y))
    return call_before(node, aten.where.ScalarSelf, (call_before(node, aten.ne.Tensor, (x, x)), 0.0 if nan is None else nan, y))


def from_lerp(node):
    """lerp(a, b, w) as ATen computes it: w < 0.5 ? a + w (b - a) : b - (b - a)(1 - w); a scalar
    w picks its branch here, a tensor one by where."""
    if not _float_in(node):
        return None
    a, b, w = node.args[:3]
    diff = call_before(node, aten.sub.Tensor, (b, a))
    if not isinstance(w, Node):
        w = float(w)
        if w < 0.5:
            return call_before(node, aten.add.Tensor, (a, call_before(node, aten.mul.Tensor, (diff, w))))
        return call_before(node, aten.sub.Tensor, (b, call_before(node, aten.mul.Tensor, (diff, 1.0 - w))))
    low = call_before(node, aten.add.Tensor, (a, call_before(node, aten.mul.Tensor, (w, diff))))
    high = call_before(node, aten.sub.Tensor, (b, call_before(node, aten.mul.Tensor, (diff, call_before(node, aten.rsub.Scalar, (w, 1.0))))))
    return call_before(node, aten.where.self, (call_before(node, aten.lt.Scalar, (w, 0.5)), low, high))


def from_addcdiv(node):
    """addcdiv(x, t1, t2, value) -> x + value * (t1 / t2)."""
    if not _float_in(node):
        return None
    x, t1, t2 = node.args[:3]
    q = call_before(node, aten.div.Tensor, (t1, t2))
    value = arg(node, 3, "value", 1)
    return call_before(node, aten.add.Tensor, (x, q if value == 1 else call_before(node, aten.mul.Tensor, (q, value))))


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


def from_cosine_similarity(node):
    """cosine_similarity(x1, x2, dim, eps) as ATen computes it: each operand divided by its 2-norm
    along dim (clamped to eps), the products summed (operands of one shape; broadcasting ones,
    whose norms ATen takes after expanding, stay)."""
    x1, x2 = node.args[:2]
    dim, eps = int(arg(node, 2, "dim", 1)), float(arg(node, 3, "eps", 1e-8))
    v1, v2 = val(x1), val(x2)
    if not _float_in(node) or not isinstance(v2, torch.Tensor) or [str(d) for d in v1.shape] != [str(d) for d in v2.shape]:
        return None
    unit = []
    for x in (x1, x2):
        norm = call_before(node, aten.clamp_min.default, (call_before(node, aten.linalg_vector_norm.default, (x, 2, [dim], True)), eps))
        unit.append(call_before(node, aten.div.Tensor, (x, norm)))
    prod = call_before(node, aten.mul.Tensor, tuple(unit))
    return call_before(node, aten.sum.dim_IntList, (prod, [dim]))


def norm_from_pairwise_distance(node):
    """pairwise_distance(x1, x2, p, eps, keepdim) = ||x1 - x2 + eps||_p over the last dim (ATen's
    formula), p = 2."""
    x1, x2 = node.args[:2]
    p, eps, keepdim = float(arg(node, 2, "p", 2.0)), float(arg(node, 3, "eps", 1e-6)), bool(arg(node, 4, "keepdim", False))
    v = val(x1)
    if p != 2 or not _float_in(node) or not isinstance(v, torch.Tensor) or v.dim() == 0:
        return None
    diff = call_before(node, aten.sub.Tensor, (x1, x2))
    shifted = call_before(node, aten.add.Tensor, (diff, eps))
    return call_before(node, aten.linalg_vector_norm.default, (shifted, 2, [-1], keepdim))


def from_cdist(node):
    """cdist(x1, x2, p=2) (prototypical networks, point-cloud neighbours) as ATen computes it:
    with more than 25 rows on either side (or compute_mode "use_mm_for_euclid_dist": 1) its
    _euclidean_dist, cat([-2 x1, |x1|^2, 1]) @ cat([x2, 1, |x2|^2])^T, clamped to 1e-30, sqrt;
    else the norm of each difference, ||x1_i - x2_j|| over the last dim."""
    x1, x2 = node.args[:2]
    p, mode = float(arg(node, 2, "p", 2.0)), arg(node, 3, "compute_mode", None)
    v1, v2 = val(x1), val(x2)
    if p != 2 or not _float_in(node) or not isinstance(v2, torch.Tensor) or v1.dim() < 2 or v2.dim() < 2:
        return None
    rows = (v1.shape[-2], v2.shape[-2])
    if not all(isinstance(r, int) for r in rows) or dynamic_size(x1, [v1.dim() - 2]) or dynamic_size(x2, [v2.dim() - 2]):
        return None                     # (ATen's choice of formula reads the row counts)
    if mode not in (None, 0, 1, 2):     # (ATen's int: 0 if necessary, 1 always, 2 never)
        return None
    mm = mode == 1 or (mode in (None, 0) and max(rows) > 25)
    if not mm:
        diff = call_before(node, aten.sub.Tensor, (call_before(node, aten.unsqueeze.default, (x1, -2)),
                                                   call_before(node, aten.unsqueeze.default, (x2, -3))))
        return call_before(node, aten.linalg_vector_norm.default, (diff, 2, [-1], False))
    parts = []
    for x, first in ((x1, True), (x2, False)):
        norm = call_before(node, aten.sum.dim_IntList, (call_before(node, aten.pow.Tensor_Scalar, (x, 2)), [-1], True))
        ones = call_before(node, aten.ones_like.default, (norm,))
        lead = call_before(node, aten.mul.Tensor, (x, -2)) if first else x
        parts.append(call_before(node, aten.cat.default, ([lead, norm, ones] if first else [lead, ones, norm], -1)))
    prod = call_before(node, aten.matmul.default, (parts[0], call_before(node, aten.transpose.int, (parts[1], -1, -2))))
    return call_before(node, aten.sqrt.default, (call_before(node, aten.clamp_min.default, (prod, 1e-30)),))


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


def promote_mixed_operands(node):
    """add / sub / mul / div / maximum / minimum of a float tensor and an integer or bool one, or
    the true division of integers (DeBERTa's relative positions / a scalar): the integer ones
    cast to the float dtype first, as torch's type promotion does (a count added to a float
    score); the kernels take operands of one dtype."""
    a, b = node.args[:2]
    va, vb, out = val(a), val(b), val(node)
    if not isinstance(va, torch.Tensor) or not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
        return None
    cast = [isinstance(x, Node) and isinstance(v, torch.Tensor) and not v.dtype.is_floating_point
            for x, v in ((a, va), (b, vb))]
    if not any(cast):
        return None
    args = [call_before(node, aten._to_copy.default, (x,), {"dtype": out.dtype}) if c else x for x, c in zip((a, b), cast)]
    return call_before(node, node.target, (*args, *node.args[2:]), dict(node.kwargs))


TOPK_MAX = 8       # topk as k selections up to this k (4 small dispatches each); a larger k: a sort


def _sorted(node, x, dim, descending, k=None):
    """(values, indices) of x sorted along dim: a stable argsort (the argsort kernel), its first
    k, and the values gathered by them."""
    idx = call_before(node, aten.argsort.stable, (x,), {"stable": True, "dim": dim, "descending": descending})
    if k is not None:
        idx = call_before(node, aten.slice.Tensor, (idx, dim, 0, k))
    return call_before(node, aten.gather.default, (x, dim, idx)), idx


def gather_from_sort(node):
    """sort(x, dim, descending) + getitems -> argsort (stable: equal values in their order, which
    torch's default sort leaves unspecified) and a gather of the values by it (ToMe's and
    DynamicViT's token ranking, MoE token grouping)."""
    x, users = node.args[0], list(node.users)
    v = val(x)
    if not isinstance(v, torch.Tensor) or v.dim() == 0 or v.dtype not in (torch.float32, torch.int64, torch.int32) \
            or not users or not all(u.target is operator.getitem for u in users):
        return None
    dim = node.kwargs.get("dim", -1) if node.target == aten.sort.stable else arg(node, 1, "dim", -1)
    descending = node.kwargs.get("descending", False) if node.target == aten.sort.stable else arg(node, 2, "descending", False)
    parts = _sorted(node, x, int(dim), bool(descending))
    return _replace_items(node, users, parts)


def selections_from_topk(node):
    """topk(x, k, dim, largest) + getitems, k <= TOPK_MAX, float x with a static dim: k rounds of
    i = argmax(x', dim) (argmin where not largest), v = gather(x, dim, i), x' = where(position
    == i, -inf, x'), the values and indices concatenated in order (MoE routing: k = 1, 2). A NaN
    counts as the largest, as in torch's; equal values come lowest index first, where torch's
    order among them is unspecified; x' starts with -inf as float32's lowest, so that a chosen
    position is never chosen again."""
    x, k = node.args[0], int(node.args[1])
    dim, largest = int(arg(node, 2, "dim", -1)), bool(arg(node, 3, "largest", True))
    v, users = val(x), list(node.users)
    if not _float_in(node) or k < 1 or not users or not all(u.target is operator.getitem for u in users):
        return None
    dim %= v.dim()
    n = v.shape[dim]
    if k > TOPK_MAX or not isinstance(n, int) or dynamic_size(x, [dim]):    # a sort's first k (ties: lowest index first)
        parts = _sorted(node, x, dim, largest, k)
        return _replace_items(node, users, parts)
    if k > n:
        return None
    pick = aten.argmax.default if largest else aten.argmin.default
    gone = float("-inf") if largest else float("inf")
    edge = float(torch.finfo(v.dtype).min if largest else torch.finfo(v.dtype).max)
    work = call_before(node, aten.where.ScalarSelf, (call_before(node, aten.eq.Scalar, (x, gone)), edge, x))
    positions = _iota(node, n, v.dim(), dim)
    values, indices = [], []
    for j in range(k):
        i = call_before(node, pick, (work, dim, True))
        indices.append(i)
        values.append(call_before(node, aten.gather.default, (x, dim, i)))
        if j + 1 < k:
            work = call_before(node, aten.where.ScalarSelf, (call_before(node, aten.eq.Tensor, (positions, i)), gone, work))
    for u in users:
        parts = values if u.args[1] == 0 else indices
        new = parts[0] if k == 1 else call_before(node, aten.cat.default, (parts, dim))
        new.meta["val"] = val(u)
        u.replace_all_uses_with(new)
        node.graph.erase_node(u)
    return new


def expands_from_meshgrid(node):
    """meshgrid(t_0, .., t_n-1) + getitems (1-D tensors): output i is t_i viewed along its dim of
    the grid (dims 0 and 1 swapped for indexing "xy") and expanded to the grid's shape: views and
    a broadcast copy (a flow-warping grid of aranges whose lengths are dynamic dims)."""
    tensors, users = list(node.args[0]), list(node.users)
    xy = arg(node, 1, "indexing", "ij") == "xy"
    if not users or not all(u.target is operator.getitem for u in users) or not all(
            isinstance(val(t), torch.Tensor) and val(t).dim() == 1 for t in tensors):
        return None
    n = len(tensors)
    new = None
    for u in users:
        i = u.args[1]
        at = {0: 1, 1: 0}.get(i, i) if xy and n > 1 else i
        line = call_before(node, aten.reshape.default, (tensors[i], [-1 if d == at else 1 for d in range(n)]))
        new = call_before(node, aten.expand.default, (line, list(val(u).shape)))
        new.meta["val"], new.meta[SHAPE_OF] = val(u), u.name     # (vkq.dynamic: the grid's symbolic shape)
        u.replace_all_uses_with(new)
        node.graph.erase_node(u)
    return new


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


def extremes_from_int_clamp(node):
    """clamp(ids, lo, hi) (normalize_ops spells it hardtanh, or relu for clamp(min=0)), clamp_min,
    clamp_max of an integer tensor -> maximum / minimum by 0-d constants of its dtype: int32 word
    ops on Vulkan, where the float clamp's kernel cannot take it."""
    from ._graph import add_constant
    x, v = node.args[0], val(node)
    if not isinstance(v, torch.Tensor) or v.dtype not in (torch.int64, torch.int32) or val(x).dtype != v.dtype:
        return None
    if node.target == aten.relu.default:
        lo, hi = 0, None
    elif node.target == aten.clamp_max.default:
        lo, hi = None, arg(node, 1, "max")
    elif node.target == aten.clamp_min.default:
        lo, hi = arg(node, 1, "min"), None
    else:
        lo, hi = (arg(node, 1, "min_val", -1), arg(node, 2, "max_val", 1)) if node.target == aten.hardtanh.default \
            else (arg(node, 1, "min"), arg(node, 2, "max"))
    if any(b is not None and (isinstance(b, Node) or float(b) != int(b) or not -2 ** 31 <= int(b) < 2 ** 31)
           for b in (lo, hi)):
        return None     # a tensor bound, a fractional one (a float result), one beyond int32's words
    out = x
    for bound, op in ((lo, aten.maximum.default), (hi, aten.minimum.default)):
        if bound is not None:
            c = add_constant(node.graph.owning_module, f"{node.name}_bound", torch.tensor(int(bound), dtype=v.dtype), node)
            out = _made(node, op, (out, c), tuple(v.shape), v.dtype)
    return out


def linear_from_bilinear(node):
    """nn.Bilinear: y[..., o] = sum_ij x1[..., i] w[o, i, j] x2[..., j] + b[o]: the outer product
    x1 (x) x2 flattened, times w viewed (O, I*J) transposed, plus b: a mul, a matmul and an add
    with kernels (ATen sums it through _trilinear; the same terms, another order)."""
    x1, x2, w = node.args[:3]
    b = arg(node, 3, "bias")
    v1, v2, vw = val(x1), val(x2), val(w)
    if not all(isinstance(v, torch.Tensor) and v.is_floating_point() for v in (v1, v2, vw)) \
            or not all(isinstance(d, int) for d in (*v1.shape, *v2.shape)) or v1.shape[:-1] != v2.shape[:-1]:
        return None
    lead, (o, i, j), f = list(v1.shape[:-1]), vw.shape, v1.dtype
    a = _made(node, aten.unsqueeze.default, (x1, -1), (*lead, i, 1), f)
    c = _made(node, aten.unsqueeze.default, (x2, -2), (*lead, 1, j), f)
    outer = _made(node, aten.reshape.default, (_made(node, aten.mul.Tensor, (a, c), (*lead, i, j), f), [*lead, i * j]),
                  (*lead, i * j), f)
    flat_w = _made(node, aten.reshape.default, (w, [o, i * j]), (o, i * j), vw.dtype)
    out = _made(node, aten.matmul.default, (outer, _made(node, aten.t.default, (flat_w,), (i * j, o), vw.dtype)),
                (*lead, o), f)      # (a matmul: the float linear has no kernel for float weights)
    return out if b is None else _made(node, aten.add.Tensor, (out, b), (*lead, o), f)


def bmm_from_affine_grid(node):
    """affine_grid_generator(theta (N, 2, 3), size (N, C, H, W), align_corners) as ATen computes
    it (AffineGridGenerator.cpp): its base grid (x, y, 1 at every position: linspace(-1, 1) per
    dim, scaled by (n - 1) / n without align_corners) times theta^T, a bmm; the base grid made
    here by ATen itself, a constant."""
    from ._graph import add_constant
    theta, size, align = node.args[0], node.args[1], bool(node.args[2])
    v = val(theta)
    if len(size) != 4 or not all(isinstance(d, int) for d in size) or not isinstance(v, torch.Tensor) \
            or not v.is_floating_point():
        return None
    n, _, h, w = size
    theta1 = torch.tensor([[[1.0, 0, 0], [0, 1, 0]]], dtype=v.dtype)   # ATen's base grid, read back
    base = torch.ops.aten.affine_grid_generator.default(theta1, [1, 1, h, w], align).reshape(1, h * w, 2)
    base = torch.cat([base, torch.ones(1, h * w, 1, dtype=v.dtype)], 2).expand(n, h * w, 3).contiguous()
    grid = add_constant(node.graph.owning_module, f"{node.name}_base", base, node)
    t = _made(node, aten.transpose.int, (theta, 1, 2), (n, 3, 2), v.dtype)
    out = _made(node, aten.bmm.default, (grid, t), (n, h * w, 2), v.dtype)
    return _made(node, aten.view.default, (out, [n, h, w, 2]), (n, h, w, 2), v.dtype)


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


def from_round_decimals(node):
    """round(x, decimals=d), float -> round(x * 10^d) / 10^d (d < 0: round(x / 10^-d) * 10^-d), as
    ATen's kernel computes it with the power as a float32 constant; d = 0: round(x)."""
    if not _float_in(node):
        return None
    x, d = node.args[0], int(node.kwargs.get("decimals", node.args[1] if len(node.args) > 1 else 0))
    if d == 0:
        return call_before(node, aten.round.default, (x,))
    p = float(torch.tensor(10.0 ** abs(d), dtype=torch.float32))
    scale, unscale = (aten.mul.Tensor, aten.div.Tensor) if d > 0 else (aten.div.Tensor, aten.mul.Tensor)
    return call_before(node, unscale, (call_before(node, aten.round.default, (call_before(node, scale, (x, p)),)), p))


def from_logit(node):
    """logit(x, eps) -> log(x / (1 - x)), x clamped to [eps, 1 - eps] first where eps is given
    (ATen's formula; a NaN stays NaN)."""
    if not _float_in(node):
        return None
    x, eps = node.args[0], arg(node, 1, "eps")
    if eps is not None:
        x = call_before(node, aten.clamp.default, (x, float(eps), 1.0 - float(eps)))
    ratio = call_before(node, aten.div.Tensor, (x, call_before(node, aten.rsub.Scalar, (x, 1.0))))
    return call_before(node, aten.log.default, (ratio,))


def where_from_fmax(node):
    """fmax / fmin(a, b) -> where(a is NaN, b, where(b is NaN, a, maximum / minimum(a, b))): the
    other operand where one is NaN (NaN only where both are)."""
    if not _float_in(node) or not all(isinstance(x, Node) for x in node.args[:2]):
        return None
    a, b = node.args[:2]
    pick = aten.maximum.default if node.target == aten.fmax.default else aten.minimum.default
    inner = call_before(node, aten.where.self, (call_before(node, aten.ne.Tensor, (b, b)), a, call_before(node, pick, (a, b))))
    return call_before(node, aten.where.self, (call_before(node, aten.ne.Tensor, (a, a)), b, inner))


def mul_from_ldexp(node):
    """ldexp(x, e) -> x * 2^e (ATen's mul(x, pow(2, e)); an integer e cast to float first)."""
    x, e = node.args[:2]
    if not _float_in(node) or not isinstance(e, Node) or val(node).dtype != val(x).dtype:
        return None
    if not val(e).dtype.is_floating_point:
        e = call_before(node, aten._to_copy.default, (e,), {"dtype": val(x).dtype})
    return call_before(node, aten.mul.Tensor, (x, call_before(node, aten.pow.Scalar, (2.0, e))))


def on_bools_from_logical(node):
    """logical_and / or / xor of non-bool tensors -> the same of (x != 0); logical_xor of bools
    -> bitwise_xor (logic kernels take bools)."""
    a, b = node.args[:2]
    if not all(isinstance(x, Node) and isinstance(val(x), torch.Tensor) for x in (a, b)):
        return None
    if node.target == aten.logical_xor.default and val(a).dtype == val(b).dtype == torch.bool:
        return call_before(node, aten.bitwise_xor.Tensor, (a, b))
    if val(a).dtype == val(b).dtype == torch.bool:
        return None
    a, b = (x if val(x).dtype == torch.bool else call_before(node, aten.ne.Scalar, (x, 0)) for x in (a, b))
    return call_before(node, node.target, (a, b))


def select_from_kthvalue(node):
    """kthvalue(x, k, dim) / median(x, dim) (values, indices) + getitems, static dim -> the
    (k - 1)-th / ((n - 1) // 2)-th of a stable argsort along dim and the values gathered by it
    (a NaN sorts last, as in torch's kthvalue; median is NaN where the row has one, as torch's);
    nanmedian: the ((c - 1) // 2)-th, c the row's count of numbers (a row of NaNs: its first);
    median(x) / nanmedian(x) of everything: of x flattened, the value alone. Among equal values
    the index is the lowest-indexed's at that rank (torch leaves it unspecified)."""
    x, users = node.args[0], list(node.users)
    v = val(x)
    if not _float_in(node) or v.dim() == 0:
        return None
    whole = node.target in (aten.median.default, aten.nanmedian.default)
    skip_nan = node.target in (aten.nanmedian.default, aten.nanmedian.dim)
    if whole:
        x, dim, keepdim = call_before(node, aten.reshape.default, (x, [-1])), 0, False
    elif node.target == aten.kthvalue.default:
        dim, keepdim = int(arg(node, 2, "dim", -1)) % v.dim(), bool(arg(node, 3, "keepdim", False))
    else:
        dim, keepdim = int(arg(node, 1, "dim")) % v.dim(), bool(arg(node, 2, "keepdim", False))
    n = math.prod(v.shape) if whole else v.shape[dim]
    if not isinstance(n, int) or n == 0 or dynamic_size(node.args[0]) or (
            not whole and (not users or not all(u.target is operator.getitem for u in users))):
        return None
    k = int(node.args[1]) - 1 if node.target == aten.kthvalue.default else (n - 1) // 2
    if not 0 <= k < n:
        return None
    values, indices = _sorted(node, x, dim, False)
    if skip_nan:
        numbers = call_before(node, aten.cumsum.default, (call_before(node, aten.eq.Tensor, (x, x)), dim))
        count = call_before(node, aten.slice.Tensor, (numbers, dim, n - 1, n))
        half = call_before(node, aten.floor_divide.Scalar, (call_before(node, aten.sub.Tensor, (count, 1)), 2))
        clamp = call_before(node, aten.clamp.default, (half, 0, n - 1))
        at = extremes_from_int_clamp(clamp)     # (this pass visits the graph's nodes of its start only)
        node.graph.erase_node(clamp)
        picked = [call_before(node, aten.gather.default, (t, dim, at)) for t in (values, indices)]
    else:
        picked = [call_before(node, aten.slice.Tensor, (t, dim, k, k + 1)) for t in (values, indices)]
    if node.target in (aten.median.default, aten.median.dim):    # NaN where the row holds one (then its last is)
        last = call_before(node, aten.slice.Tensor, (values, dim, n - 1, n))
        picked[0] = call_before(node, aten.where.self, (call_before(node, aten.ne.Tensor, (last, last)), last, picked[0]))
    parts = [t if keepdim else call_before(node, aten.squeeze.dim, (t, dim)) for t in picked]
    if whole:
        return parts[0]
    return _replace_items(node, users, parts)


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


def index_from_masked_scatter(node):
    """masked_scatter(x, mask, source) -> where(mask, source flattened [the mask's running count
    - 1], x): the k-th set position takes source's k-th element, as torch's. Static shapes; the
    running count is clamped into source (torch refuses a mask with more set positions than
    source has elements; a kernel must not read past it)."""
    x, mask, source = node.args[:3]
    vx, vm, vs = val(x), val(mask), val(source)
    if not all(isinstance(v, torch.Tensor) for v in (vx, vm, vs)) or vm.dtype != torch.bool or vs.numel() == 0 \
            or any(dynamic_size(n) for n in (x, mask, source)):
        return None
    shape = list(vx.shape)
    full = mask if list(vm.shape) == shape else call_before(node, aten.expand.default, (mask, shape))
    flat = call_before(node, aten.reshape.default, (full, [-1]))
    count = call_before(node, aten.cumsum.default, (flat, 0), {"dtype": torch.int64})
    clamp = call_before(node, aten.clamp.default, (call_before(node, aten.sub.Tensor, (count, 1)), 0, vs.numel() - 1))
    at = extremes_from_int_clamp(clamp)     # (this pass visits the graph's nodes of its start only)
    node.graph.erase_node(clamp)
    picked = call_before(node, aten.index.Tensor, (call_before(node, aten.reshape.default, (source, [-1])), [at]))
    return call_before(node, aten.where.self, (full, call_before(node, aten.reshape.default, (picked, shape)), x))


def compares_from_signbit(node):
    """signbit(x) -> x < 0, and for a float x also where x == 0 the sign of 1 / x (-0.0 gives
    -inf): torch's for every value but a NaN whose sign bit is set (false here)."""
    x = node.args[0]
    v = val(x)
    if not isinstance(v, torch.Tensor):
        return None
    below = call_before(node, aten.lt.Scalar, (x, 0))
    if not v.dtype.is_floating_point:
        return below
    zero = call_before(node, aten.eq.Scalar, (x, 0))
    negative_zero = call_before(node, aten.lt.Scalar, (call_before(node, aten.reciprocal.default, (x,)), 0))
    return call_before(node, aten.where.self, (zero, negative_zero, below))


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


DECOMPOSE = {
    **{t: moments_from_var for t in (aten.var.dim, aten.std.dim, aten.var.correction, aten.std.correction)},
    **{t: moments_from_var_mean for t in (aten.var_mean.correction, aten.var_mean.dim, aten.std_mean.correction,
                                          aten.std_mean.dim)},
    aten.logsumexp.default: from_logsumexp,
    aten.affine_grid_generator.default: bmm_from_affine_grid,
    aten.bilinear.default: linear_from_bilinear,
    aten.max.dim: reductions_from_max_dim, aten.min.dim: reductions_from_max_dim,
    aten.one_hot.default: eq_from_one_hot,
    aten.scatter.value: where_from_scatter,
    aten.clamp.Tensor: extremes_from_clamp,
    **{t: extremes_from_int_clamp for t in (aten.hardtanh.default, aten.clamp.default, aten.clamp_min.default,
                                            aten.clamp_max.default, aten.relu.default)},
    aten.threshold.default: where_from_threshold,
    aten.hardshrink.default: where_from_shrink, aten.softshrink.default: where_from_shrink,
    aten.selu.default: elu_from_celu_selu, aten.celu.default: elu_from_celu_selu,
    aten.rrelu.default: leaky_relu_from_rrelu,
    aten.log_sigmoid.default: softplus_from_log_sigmoid,
    aten.heaviside.default: where_from_heaviside,
    aten.frac.default: sub_from_frac,
    aten.sgn.default: sign_from_sgn,
    aten.deg2rad.default: mul_from_angle, aten.rad2deg.default: mul_from_angle,
    aten.nansum.default: sum_from_nansum,
    aten.prod.default: last_from_prod, aten.prod.dim_int: last_from_prod,
    aten.aminmax.default: extremes_from_aminmax,
    aten.histc.default: counts_from_histc,
    aten.cumsum.default: cast_before_cumsum,
    aten.logaddexp.default: from_logaddexp, aten.logaddexp2.default: from_logaddexp,
    aten.sinc.default: from_sinc,
    aten.xlogy.Tensor: from_xlogy,
    aten.count_nonzero.dim_IntList: sum_from_count_nonzero, aten.count_nonzero.default: sum_from_count_nonzero,
    aten.bucketize.Tensor: counts_from_bucketize,
    aten.isnan.default: ne_from_isnan,
    aten.nan_to_num.default: where_from_nan_to_num,
    aten.lerp.Scalar: from_lerp, aten.lerp.Tensor: from_lerp,
    aten.addcdiv.default: from_addcdiv,
    aten.diff.default: sub_from_diff,
    **{getattr(aten, b).Tensor: promote_mixed_operands for b in ("add", "sub", "mul", "div")},
    aten.div.Scalar: promote_mixed_operands,
    aten.maximum.default: promote_mixed_operands, aten.minimum.default: promote_mixed_operands,
    aten.topk.default: selections_from_topk,
    aten.sort.default: gather_from_sort, aten.sort.stable: gather_from_sort,
    aten.meshgrid.default: expands_from_meshgrid, aten.meshgrid.indexing: expands_from_meshgrid,
    aten.cosine_similarity.default: from_cosine_similarity,
    aten.pairwise_distance.default: norm_from_pairwise_distance,
    aten.cdist.default: from_cdist,
    **{t: from_any_all_count for t in (aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims,
                                       aten.all.default)},
    aten.sum.dim_IntList: count_or_int_sum, aten.sum.default: last_from_int_sum,
    aten.round.decimals: from_round_decimals,
    aten.logit.default: from_logit,
    aten.fmax.default: where_from_fmax, aten.fmin.default: where_from_fmax,
    aten.ldexp.Tensor: mul_from_ldexp,
    **{t: on_bools_from_logical for t in (aten.logical_and.default, aten.logical_or.default, aten.logical_xor.default)},
    aten.kthvalue.default: select_from_kthvalue, aten.median.dim: select_from_kthvalue,
    aten.median.default: select_from_kthvalue, aten.nanmedian.dim: select_from_kthvalue,
    aten.nanmedian.default: select_from_kthvalue,
    aten.masked_scatter.default: index_from_masked_scatter,
    aten.signbit.default: compares_from_signbit,
    aten.linalg_vector_norm.default: sums_from_vector_norm, aten.dist.default: sums_from_vector_norm,
    aten.real.default: dft_from_fft, aten.imag.default: dft_from_fft, aten.abs.default: complex_abs_or_float,
    aten.select.int: dft_from_fft,          # (select(view_as_real(fft), -1, 0): real in a decomposed export)
    aten.view_as_real.default: dft_from_fft,
}


def decompose_ops(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        rule = DECOMPOSE.get(node.target) if node.op == "call_function" else None
        new = rule(node) if rule is not None else None
        if new is not None:
            node.replace_all_uses_with(new)
            gm.graph.erase_node(node)
            changed = True
    return finish(gm, changed)
