"""decompose_indexing: decompose_ops' rules for ops that pick or place values by index: sort (a
stable argsort and a gather), topk (k rounds of argmax, gather and a where; a larger k: a sort),
kthvalue / median / nanmedian (a rank of the sort), one_hot and a scatter of one index along its
dim (compares with an arange), masked_scatter (a gather by the mask's running count), meshgrid
(views expanded). A module of its own so that decompose_ops.py stays the table and the pass (it
had grown past 800 lines); decompose_ops.DECOMPOSE holds these rules with the others.
"""
from __future__ import annotations

import math
import operator

import torch

from ._graph import SHAPE_OF, arg, aten, call_before, dynamic_size, val
from .decompose_pointwise import _float_in, extremes_from_int_clamp


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


def _replace_items(node, users, parts):
    """Each getitem user of a tuple-valued node replaced by parts[its index]; the last one returned."""
    for u in users:
        new = parts[u.args[1]]
        new.meta["val"] = val(u)
        u.replace_all_uses_with(new)
        node.graph.erase_node(u)
    return new


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
