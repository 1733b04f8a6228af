"""Ops on ids and masks (int32 / bool words) on Vulkan: comparisons, bitwise and logical ops,
casts, where, and the embedding gather (shaders/word_ops.comp, shaders/embedding.comp).

Every integer and bool tensor is int32 on the device (bool: 0 / 1); these ops make an
encoder's id and attention-mask arithmetic (BERT's index/and/expand of the padding mask,
GPT-2's causal mask, (1 - mask) * finfo.min) run beside its float and int8 kernels instead
of on the host. The int32 add/sub/mul share their names with the float ops (vkq/ops/float.py).

  eq, ne, lt, le, gt, ge(a[, b]; scalar)      float32 or int32 operands -> bool
  bitwise_and, bitwise_or, bitwise_xor(a[, b]; scalar)   int32/bool -> the same
  logical_not(x)                                          bool -> bool
  remainder, floor_divide, fmod(a[, b]; scalar, scalar_first)   int32 as Python's / C's (by 0: 0),
  trunc_divide(a[, b]; scalar)   int32 as C's / (torch.div(rounding_mode="trunc"); by 0: 0)
                            or float32 as ATen's (fmod exact; floor_divide, trunc_divide exact where
                            |a / b| < 2^20)
  atan2, hypot, pow_tensor, copysign(a[, b]; scalar, scalar_first)   float32 (pow_tensor: a ** b
                            elementwise; atan2, hypot, pow by float_math.glsl: a few ulp)
  cast(x; dtype)            to "float32" (from int), "int32" (from float: toward 0, as torch),
                            "bool" (x != 0)
  where(cond, a, b)         cond ? a : b, broadcast (a, b of one dtype)
  embedding(table, ids)     table (V, D) float32 rows by int32 ids: out (*ids.shape, D);
                            an id outside [0, V) reads the nearest row (PyTorch raises there)
  embedding_bag(table, ids, offsets[, weights]; mode, include_last_offset, padding_idx)
                            nn.EmbeddingBag: each bag's rows (ids[offsets[b]:offsets[b + 1]])
                            summed in order (times weights), averaged or maxed; padding_idx's ids
                            skipped; an empty bag 0; ids and offsets clamped (as embedding)
  gather(x, index; dim)     torch.gather by an int32 index computed on the device (RoBERTa's
                            token types at its position ids); x float32 or int32; an index
                            outside [0, x.shape[dim]) reads the nearest (as embedding)
  index(x, i0[, i1, i2])    x[i0, i1, i2]: advanced indexing of the leading dims by int32 index
                            tensors computed on the device, broadcast together (transformers'
                            padding mask gathered at arange indices); negative indices count
                            from the end, as torch's; out of range reads the nearest
  scatter(x, index, src; dim, reduce, include_self, along)
                            torch.scatter / scatter_add / scatter_reduce (reduce "none": the
                            last write wins; "sum", "prod", "mean", "amax", "amin"), and with
                            along=True (a 1-D index naming the x slice of each src slice)
                            index_add / index_copy / index_fill; src of shape () is a scalar
                            (scatter's and index_fill's value). The index's elements apply in
                            their order, as ATen's CPU kernels apply them (MoE's top-k routing
                            weights, a graph net's message sums); an index outside
                            [-size, size) writes nothing (PyTorch raises)
Exact on every device (word operations; float comparisons and int -> float are exact; scatter's
float sums and products are single IEEE operations in the reference's order, its mean one
division, within Vulkan's 2.5 ulp).
"""
from __future__ import annotations

import numpy as np

from ..registry import register_op
from ..device import grid_1d
from ..vkinfo import DeviceLimit
from .float import LOCAL, MAX_RANK, PER, _elementwise, _numel, _pad, broadcast_strides, merge_dims, strides_of

COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}
BITWISE = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}


def _floored(fn):
    """Python's (torch's) integer floor division / remainder: the remainder takes the divisor's
    sign; by 0 both give 0 (torch raises; no wrong number either way)."""
    def f(a, b):
        with np.errstate(divide="ignore", over="ignore"):
            return np.where(b == 0, 0, fn(a, np.where(b == 0, 1, b)))
    return f


def _trunc_divide(a, b):
    """C's truncating integer division (numpy's // floors): the floored quotient, one more
    where it is below the exact one's and the signs differ."""
    q = np.floor_divide(a, b)
    return np.where((q * b != a) & ((a < 0) != (b < 0)), q + 1, q)


FLOORED = {"remainder": _floored(np.remainder), "floor_divide": _floored(np.floor_divide), "fmod": _floored(np.fmod),
           "trunc_divide": _floored(_trunc_divide)}
_VARIANT = {"bitwise_and": "I_AND", "bitwise_or": "I_OR", "bitwise_xor": "I_XOR",
            "add": "I_ADD", "sub": "I_SUB", "mul": "I_MUL", "remainder": "I_REM", "floor_divide": "I_FLOORDIV",
            "fmod": "I_FMOD", "trunc_divide": "I_TRUNCDIV", "maximum": "I_MAXIMUM", "minimum": "I_MINIMUM"}


def _f32(a):
    return np.asarray(a, np.float32)


def _remainder_f32(a, b):
    """ATen's float remainder: fmod (exact), plus b where the signs differ (one float32 add)."""
    m = np.fmod(a, b)
    return np.where((m != 0) & ((b < 0) != (m < 0)), m + b, m)


def _floor_divide_f32(a, b):
    """ATen's div_floor_floating in float32: (a - fmod(a, b)) / b, less 1 where the signs differ,
    rounded to its integer; a / b by 0."""
    m = np.fmod(a, b)
    q = (a - m) / b
    q = np.where((m != 0) & ((b < 0) != (m < 0)), q - np.float32(1), q)
    fl = np.floor(q)
    fl = np.where(q - fl > 0.5, fl + np.float32(1), fl)
    fl = np.where(q == 0, np.copysign(np.float32(0), a / b), fl)
    return np.where(b == 0, a / b, fl)


def _trunc_divide_f32(a, b):
    """ATen's div_trunc_floating: trunc of the correctly rounded float32 quotient."""
    return np.trunc(a / b)


def _in_f64(fn):
    return lambda a, b: fn(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)


# float32 ops of two tensors (or a tensor and a scalar, either first): word_ops' F_ variants
FLOAT_BINARY = {"remainder": (_remainder_f32, "F_REM"), "floor_divide": (_floor_divide_f32, "F_FLOORDIV"),
                "trunc_divide": (_trunc_divide_f32, "F_TRUNCDIV"),
                "fmod": (np.fmod, "F_FMOD"), "atan2": (_in_f64(np.arctan2), "F_ATAN2"),
                "hypot": (_in_f64(np.hypot), "F_HYPOT"), "pow_tensor": (_in_f64(np.power), "F_POW"),
                "copysign": (np.copysign, "F_COPYSIGN")}


def _arith(name):
    """The reference of a FLOORED / FLOAT_BINARY op: int32 operands by FLOORED's integer rule,
    float32 ones by FLOAT_BINARY's; a scalar operand second, or first (scalar_first)."""
    def reference(a, b=None, *, scalar=None, scalar_first=False):
        a = np.asarray(a)
        if a.dtype.kind == "f":
            a, other = _f32(a), _f32(b if b is not None else scalar)
            fn = FLOAT_BINARY[name][0]
        else:
            a, other = np.asarray(a, np.int32), _other(np.asarray(a, np.int32), b, scalar).astype(np.int32)
            fn = FLOORED[name]
        with np.errstate(all="ignore"):
            r = fn(other, a) if b is None and scalar_first else fn(a, other)
        return np.asarray(r, a.dtype)
    return reference
CASTS = {("int32", "float32"): "CAST_I2F", ("float32", "int32"): "CAST_F2I", ("int32", "bool"): "CAST_I2B",
         ("float32", "bool"): "CAST_F2B", ("int32", "int32"): None, ("float32", "float32"): None}


def _other(a, b, scalar):
    return np.asarray(b) if b is not None else np.asarray(scalar, a.dtype)


def _compare(fn):
    def reference(a, b=None, *, scalar=None):
        a = np.asarray(a)
        return fn(a, _other(a, b, scalar)).astype(np.int32)
    return reference


def _bitwise(fn):
    def reference(a, b=None, *, scalar=None):
        a = np.asarray(a, np.int32)
        return fn(a, _other(a, b, scalar).astype(np.int32)).astype(np.int32)
    return reference


def logical_not(x):
    return (np.asarray(x) == 0).astype(np.int32)


def cast(x, *, dtype):
    x = np.asarray(x)
    if dtype == "bool":
        return (x != 0).astype(np.int32)
    if dtype == "int32":
        return np.trunc(x).astype(np.int32) if x.dtype.kind == "f" else x.astype(np.int32)
    return x.astype(np.float32)


def where(cond, a, b):
    return np.where(np.asarray(cond) != 0, a, b)


def embedding(table, ids):
    table = np.asarray(table)
    return table[np.clip(np.asarray(ids, np.int64), 0, table.shape[0] - 1)]


EMBEDDING_BAG_MODES = ("sum", "mean", "max")


def embedding_bag(table, ids, offsets, weights=None, *, mode="sum", include_last_offset=False, padding_idx=-1):
    """nn.EmbeddingBag: bag b's rows table[ids[j]], j in [offsets[b], offsets[b + 1]) (the last
    bag's to the end of ids unless include_last_offset), times weights[j], summed in j's order
    (ATen's CPU order), averaged or maxed; ids equal to padding_idx skipped and not counted; an
    empty bag 0. Out-of-range ids and offsets are clamped (PyTorch raises)."""
    if mode not in EMBEDDING_BAG_MODES:
        raise ValueError(f"embedding_bag: mode {mode!r} (one of {EMBEDDING_BAG_MODES})")
    table, ids, offsets = np.asarray(table, np.float32), np.asarray(ids, np.int64), np.asarray(offsets, np.int64)
    n, bags = ids.shape[0], offsets.shape[0] - int(bool(include_last_offset))
    out = np.zeros((max(bags, 0), table.shape[1]), np.float32)
    for b in range(max(bags, 0)):
        lo = int(np.clip(offsets[b], 0, n))
        hi = int(np.clip(offsets[b + 1] if b + 1 < offsets.shape[0] else n, lo, n))
        j = np.arange(lo, hi)
        j = j[ids[j] != padding_idx]
        if not j.size:
            continue
        rows = table[np.clip(ids[j], 0, table.shape[0] - 1)]
        if weights is not None:
            rows = rows * np.asarray(weights, np.float32)[j][:, None]
        if mode == "max":
            out[b] = np.where(np.isnan(rows).any(0), np.nan, rows.max(0))
        else:                       # cumsum: one add after another, in j's order (np.sum pairs them)
            out[b] = np.cumsum(rows, 0, dtype=np.float32)[-1]
            if mode == "mean":
                out[b] = out[b] / np.float32(j.size)
    return out


def gather(x, index, *, dim):
    x, index = np.asarray(x), np.asarray(index, np.int64)
    dim %= max(x.ndim, 1)
    if index.ndim != x.ndim or any(i > s for d, (i, s) in enumerate(zip(index.shape, x.shape)) if d != dim):
        raise ValueError(f"gather: index {index.shape} does not fit x {x.shape} off dim {dim}")
    x = x[tuple(slice(0, s) if d != dim else slice(None) for d, s in enumerate(index.shape))]
    return np.take_along_axis(x, np.clip(index, 0, x.shape[dim] - 1), axis=dim)


def index(x, *indices):
    x = np.asarray(x)
    picked = []
    for j, i in enumerate(indices):
        i, size = np.asarray(i, np.int64), x.shape[j]
        picked.append(np.clip(np.where(i < 0, i + size, i), 0, size - 1))
    return x[tuple(picked)]


SCATTER_REDUCE = ("none", "sum", "prod", "mean", "amax", "amin")   # shaders/scatter.comp's MODE
SCATTER_SEARCH_MAX = 1 << 26     # output values x index elements searched, at most (else the CPU)


def scatter(x, index, src, *, dim, reduce="none", include_self=True, along=False, src_transpose=None):
    x, index, src = np.asarray(x), np.asarray(index, np.int64), np.asarray(src)
    src = np.swapaxes(src, *src_transpose) if src_transpose else src    # a transpose folded in (its view)
    if reduce not in SCATTER_REDUCE or not isinstance(dim, int) or not -x.ndim <= dim < max(x.ndim, 1):
        raise ValueError(f"scatter: reduce {reduce!r} along dim {dim!r} of a rank-{x.ndim} tensor "
                         f"(reduce one of {SCATTER_REDUCE})")
    dim %= max(x.ndim, 1)
    size = x.shape[dim]
    if along:                       # index_add's form: src slice j goes to x slice index[j]
        k, other = index.shape[0], x.shape[:dim] + x.shape[dim + 1:]
    else:
        k, other = index.shape[dim], index.shape[:dim] + index.shape[dim + 1:]
    # every (j, coordinates off dim) with j the slowest: the order ATen's CPU kernels apply them in
    grid = np.indices((k, *other)).reshape(1 + len(other), -1)
    j, rest = grid[0], grid[1:]
    at_j = tuple(np.insert(rest, dim, j, axis=0))
    at = index[j] if along else index[at_j]
    v = (src[at_j] if src.ndim else np.full(j.shape, src)).astype(x.dtype)
    at = np.where(at < 0, at + size, at)
    ok = (at >= 0) & (at < size)
    flat = np.ravel_multi_index(tuple(np.insert(rest[:, ok], dim, at[ok], axis=0)), x.shape)
    v, out = v[ok], x.copy().reshape(-1)
    if reduce == "none":            # the last write wins
        last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]
        out[flat[last]] = v[last]
        return out.reshape(x.shape)
    if not include_self:            # x only where nothing is written: the first write starts there
        lo, hi = (-np.inf, np.inf) if x.dtype.kind == "f" else (np.iinfo(x.dtype).min, np.iinfo(x.dtype).max)
        out[flat] = {"sum": 0, "mean": 0, "prod": 1, "amax": lo, "amin": hi}[reduce]
    ufunc = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[reduce]
    ufunc.at(out, flat, v)          # (unbuffered, in flat's order: the float sums round as the kernel's)
    if reduce == "mean":
        count = np.bincount(flat, minlength=out.size)
        seen = count > 0
        out[seen] = (out[seen] / (count[seen] + bool(include_self)).astype(x.dtype)).astype(x.dtype)
    return out.reshape(x.shape)


# ---------------------------------------------------------------- builds

def word_dispatch(ctx, variant, out, operands, scalar=None, scalar_first=False):
    """One word_ops dispatch: operands (1-3 tensor names) broadcast to out; scalar: b's word (a's,
    the tensor then b, with scalar_first)."""
    oshape = ctx.spec(out).shape
    names = list(operands) + [operands[0]] * (3 - len(operands))
    strides = [broadcast_strides(ctx.spec(t).shape, oshape) for t in names]
    if scalar is not None:
        strides[1] = [0] * len(oshape)
    shape, merged = merge_dims(oshape, *strides)
    if len(shape) > MAX_RANK:
        raise ValueError(f"{variant}: broadcasting over {len(shape)} dims (the shader takes {MAX_RANK})")
    n = _numel(oshape)
    push = (n, len(shape), 0 if scalar is None else 2 if scalar_first else 1, np.int32(0 if scalar is None else scalar),
            _pad(shape, MAX_RANK, 1), *[_pad(s, MAX_RANK) for s in merged])
    return _elementwise(ctx, "word_ops", [ctx.buffer(t) for t in names] + [ctx.buffer(out)], n, push, [variant])


def scalar_word(value, dtype) -> int:
    """A Python scalar as the 32-bit word a tensor of `dtype` holds."""
    if dtype == "float32":
        return int(np.array(value, np.float32).view(np.int32))
    return int(np.int64(value).astype(np.int32))


def _dtypes(node, tensors):
    return [tensors[t].dtype for t in node.inputs], [tensors[t].dtype for t in node.outputs]


def _compare_decline(node, tensors):
    ins, _ = _dtypes(node, tensors)
    if len(set(ins)) != 1 or ins[0] == "int8":
        return f"{node.op}: operands of dtypes {ins} (the kernel compares two float32 or two int32)"
    return None


def _compare_build(ctx, node):
    dtype = ctx.spec(node.inputs[0]).dtype
    variant = ("F_" if dtype == "float32" else "I_") + node.op.upper()
    scalar = None if len(node.inputs) == 2 else scalar_word(node.attrs["scalar"], dtype)
    return [word_dispatch(ctx, variant, node.outputs[0], node.inputs, scalar)]


def _int_decline(node, tensors):
    ins, outs = _dtypes(node, tensors)
    if set(ins + outs) != {"int32"}:
        return f"{node.op}: takes int32/bool tensors, got {ins} -> {outs}"
    return None


def int_build(ctx, node):
    """int32 add/sub/mul/bitwise ops (alpha 1, an integer scalar)."""
    scalar = None
    if len(node.inputs) == 1:
        scalar = scalar_word(node.attrs["scalar"], "int32")
    operands = list(node.inputs)
    if node.attrs.get("scalar_first"):       # scalar - a: (-a) + scalar is not this op; use b - a with b a word
        raise ValueError(f"{node.name}: a scalar first operand is declined for int32")
    return [word_dispatch(ctx, _VARIANT[node.op], node.outputs[0], operands, scalar)]


def int_decline(node, tensors) -> str | None:
    """Why an int32 add/sub/mul node cannot run as word_ops (None: it can)."""
    reason = _int_decline(node, tensors)
    if reason:
        return reason
    at = node.attrs
    if at.get("alpha", 1) != 1 or at.get("scalar_first"):
        return f"{node.op}: int32 with alpha {at.get('alpha', 1)} / a scalar first operand"
    if len(node.inputs) == 1 and float(at["scalar"]) != int(at["scalar"]):
        return f"{node.op}: an int32 tensor and a fractional scalar {at['scalar']}"
    return None


def _arith_decline(node, tensors):
    ins, outs = _dtypes(node, tensors)
    dtypes = set(ins + outs)
    if dtypes == {"float32"} and node.op in FLOAT_BINARY:
        return None
    if dtypes == {"int32"} and node.op in FLOORED:
        return None if len(node.inputs) == 2 or not node.attrs.get("scalar_first") else \
            f"{node.op}: a scalar first operand is declined for int32"
    return f"{node.op}: takes two float32 or two int32 tensors (or one and a scalar), got {ins} -> {outs}"


def _arith_build(ctx, node):
    """remainder / floor_divide / fmod of int32 or float32 words, the float32-only FLOAT_BINARY ops."""
    dtype = ctx.spec(node.outputs[0]).dtype
    if dtype == "int32":
        return int_build(ctx, node)
    scalar = scalar_word(node.attrs["scalar"], "float32") if len(node.inputs) == 1 else None
    return [word_dispatch(ctx, FLOAT_BINARY[node.op][1], node.outputs[0], node.inputs, scalar,
                          bool(node.attrs.get("scalar_first")))]


def _not_build(ctx, node):
    return [word_dispatch(ctx, "NOT", node.outputs[0], node.inputs)]


def _cast_decline(node, tensors):
    src = tensors[node.inputs[0]].dtype
    if (src, node.attrs["dtype"]) not in CASTS:
        return f"cast: {src} -> {node.attrs['dtype']} has no kernel"
    return None


def _cast_build(ctx, node):
    src = ctx.spec(node.inputs[0]).dtype
    variant = CASTS[(src, node.attrs["dtype"])]
    if variant is None:                               # a copy (int64 -> int32 are one word)
        from .shape import build as copy_build
        copy = type(node)("reshape", node.inputs, node.outputs, {"shape": list(ctx.spec(node.outputs[0]).shape)},
                          name=node.name)
        return copy_build(ctx, copy)
    return [word_dispatch(ctx, variant, node.outputs[0], node.inputs)]


def _where_decline(node, tensors):
    ins, outs = _dtypes(node, tensors)
    if ins[0] != "int32" or ins[1] != ins[2] or ins[1] == "int8" or outs[0] != ins[1]:
        return f"where: condition {ins[0]}, values {ins[1:]} -> {outs[0]} (the kernel takes bool and two alike)"
    return None


def _where_build(ctx, node):
    return [word_dispatch(ctx, "WHERE", node.outputs[0], node.inputs)]


def _embedding_decline(node, tensors):
    table, ids = (tensors[t] for t in node.inputs)
    if table.dtype != "float32" or ids.dtype != "int32" or len(table.shape) != 2:
        return f"embedding: a {table.dtype} table {table.shape} by {ids.dtype} ids (the kernel gathers float32 rows)"
    return None


def _embedding_build(ctx, node):
    table, ids = node.inputs
    rows, d = ctx.spec(table).shape
    n = _numel(ctx.spec(node.outputs[0]).shape)
    return [_elementwise(ctx, "embedding", [ctx.buffer(table), ctx.buffer(ids), ctx.buffer(node.outputs[0])], n,
                         (n, d, rows))]


def _embedding_bag_decline(node, tensors):
    table, ids, offsets, *weights = (tensors[t] for t in node.inputs)
    if table.dtype != "float32" or len(table.shape) != 2 or ids.dtype != "int32" or len(ids.shape) != 1 \
            or offsets.dtype != "int32" or len(offsets.shape) != 1 or any(w.dtype != "float32" for w in weights):
        return (f"embedding_bag: a {table.dtype} table {table.shape} by {ids.dtype} ids {ids.shape} and "
                f"{offsets.dtype} offsets {offsets.shape} (the kernel takes a float32 table, 1-D int32 ids and offsets)")
    if weights and node.attrs.get("mode", "sum") != "sum":
        return f"embedding_bag: per-sample weights with mode {node.attrs.get('mode')!r} (torch takes them with sum)"
    return None


def _embedding_bag_build(ctx, node):
    table, ids, offsets, *weights = node.inputs
    at = node.attrs
    if at.get("mode", "sum") not in EMBEDDING_BAG_MODES:
        raise ValueError(f"{node.name}: embedding_bag mode {at.get('mode')!r} (one of {EMBEDDING_BAG_MODES})")
    rows, d = ctx.spec(table).shape
    count, bounds = ctx.spec(ids).shape[0], ctx.spec(offsets).shape[0]
    ctx.device.info.check_loop_budget(count, f"{node.op}: bags of up to {count} ids, one loop iteration each")
    n = _numel(ctx.spec(node.outputs[0]).shape)
    variant = [f"MODE_{at.get('mode', 'sum').upper()}"] + (["WEIGHTED"] if weights else [])
    buffers = [ctx.buffer(t) for t in (table, ids, offsets, weights[0] if weights else table, node.outputs[0])]
    return [_elementwise(ctx, "embedding_bag", buffers, n, (n, d, rows, count, bounds, int(at.get("padding_idx", -1))),
                         variant)]


def _gather_decline(node, tensors):
    x, index = (tensors[t] for t in node.inputs)
    if x.dtype not in ("float32", "int32") or index.dtype != "int32":
        return f"gather: {x.dtype} values by {index.dtype} indices (the kernel moves float32/int32 words)"
    if len(x.shape) != len(index.shape) or not 1 <= len(x.shape) <= MAX_RANK:
        return f"gather: x {x.shape} and index {index.shape} (equal ranks, at most {MAX_RANK})"
    return None


def _gather_build(ctx, node):
    x, index = node.inputs
    xshape, shape = ctx.spec(x).shape, ctx.spec(index).shape
    dim = node.attrs["dim"] % len(xshape)
    if ctx.spec(node.outputs[0]).shape != shape or any(
            i > s for d, (i, s) in enumerate(zip(shape, xshape)) if d != dim):
        raise ValueError(f"{node.name}: gather of {xshape} by an index {shape} along dim {dim}")
    n = _numel(shape)
    push = (n, len(shape), dim, xshape[dim], _pad(shape, MAX_RANK, 1), _pad(strides_of(xshape), MAX_RANK))
    return [_elementwise(ctx, "gather", [ctx.buffer(x), ctx.buffer(index), ctx.buffer(node.outputs[0])], n, push)]


INDEX_TENSORS, INDEX_RANK = 3, 4      # shaders/index.comp's bindings and its broadcast rank


def _index_decline(node, tensors):
    x, *idx = (tensors[t] for t in node.inputs)
    if x.dtype not in ("float32", "int32") or any(i.dtype != "int32" for i in idx):
        return f"index: {x.dtype} values by {[i.dtype for i in idx]} indices (the kernel moves words by int32)"
    if not 1 <= len(idx) <= min(INDEX_TENSORS, len(x.shape)):
        return f"index: {len(idx)} index tensors into a rank-{len(x.shape)} tensor (the kernel takes 1-{INDEX_TENSORS})"
    if max(len(i.shape) for i in idx) > INDEX_RANK:
        return f"index: indices of rank {max(len(i.shape) for i in idx)} (the kernel broadcasts up to {INDEX_RANK})"
    return None


def _index_build(ctx, node):
    x, *idx = node.inputs
    xs, out = ctx.spec(x).shape, node.outputs[0]
    k = len(idx)
    bshape = tuple(np.broadcast_shapes(*[ctx.spec(i).shape for i in idx]))
    shape, strides = merge_dims(bshape, *[broadcast_strides(ctx.spec(i).shape, bshape) for i in idx])
    if ctx.spec(out).shape != bshape + tuple(xs[k:]):
        raise ValueError(f"{node.name}: indexing {xs} by {bshape} is not {ctx.spec(out).shape}")
    n = _numel(ctx.spec(out).shape)
    if n == 0:
        return []
    strides += [[0] * len(shape)] * (INDEX_TENSORS - k)
    push = (n, len(shape), _numel(xs[k:]), 0, _pad(shape, INDEX_RANK, 1), *[_pad(s, INDEX_RANK) for s in strides],
            _pad(xs[:k], 4, 1), _pad([_numel(xs[j + 1:]) for j in range(k)], 4))
    buffers = [ctx.buffer(x)] + [ctx.buffer(i) for i in idx + [idx[0]] * (INDEX_TENSORS - k)] + [ctx.buffer(out)]
    return [ctx.device.dispatch("index", buffers, grid_1d(-(-n // PER), LOCAL), local=(LOCAL,), spec=(PER, k),
                                push=push)]


def _scatter_decline(node, tensors):
    x, index, src = (tensors[t] for t in node.inputs)
    a = node.attrs
    if x.dtype not in ("float32", "int32") or src.dtype != x.dtype or index.dtype != "int32":
        return f"scatter: {src.dtype} values into {x.dtype} by {index.dtype} indices (float32/int32 words by int32)"
    if a.get("reduce", "none") not in SCATTER_REDUCE or (a.get("reduce") == "mean" and x.dtype != "float32"):
        return f"scatter: reduce {a.get('reduce')!r} on {x.dtype} (the kernel: {', '.join(SCATTER_REDUCE)}; mean: float32)"
    if not 1 <= len(x.shape) <= MAX_RANK:
        return f"scatter: a rank-{len(x.shape)} tensor (the kernel takes 1-{MAX_RANK})"
    return None


def _scatter_build(ctx, node):
    x, index, src = node.inputs
    xs, ishape, sshape = ctx.spec(x).shape, ctx.spec(index).shape, ctx.spec(src).shape
    a, rank = node.attrs, len(xs)
    swap = a.get("src_transpose")
    sstride = strides_of(sshape) if sshape else [0] * rank
    if swap:        # src read through the transpose that made it (fold_head_transposes)
        d0, d1 = swap
        sshape, sstride = list(sshape), list(sstride)
        sshape[d0], sshape[d1], sstride[d0], sstride[d1] = sshape[d1], sshape[d0], sstride[d1], sstride[d0]
        sshape = tuple(sshape)
    if not isinstance(a.get("dim"), int) or not -rank <= a["dim"] < rank:
        raise ValueError(f"{node.name}: scatter along dim {a.get('dim')!r} of a rank-{rank} tensor")
    dim = a["dim"] % rank
    if a.get("along"):      # index (k,), src = x's shape with k at dim
        k = ishape[0] if len(ishape) == 1 else -1
        istride, iext = [int(d == dim) for d in range(rank)], list(xs)
        fits = k >= 0 and (not sshape or tuple(sshape) == xs[:dim] + (k,) + xs[dim + 1:])
    else:
        k, istride, iext = ishape[dim] if len(ishape) == rank else -1, strides_of(ishape), list(ishape)
        fits = k >= 0 and all(i <= e for d, (i, e) in enumerate(zip(ishape, xs)) if d != dim) and (
            not sshape or len(sshape) == rank and all(i <= e for i, e in zip(ishape, sshape)))
    if not fits or ctx.spec(node.outputs[0]).shape != xs:
        raise ValueError(f"{node.name}: scatter into {xs} by an index {ishape} of {sshape or 'a scalar'} along dim {dim}")
    n = _numel(xs)
    if n == 0:
        return []
    if ctx.buffer(x) is ctx.buffer(node.outputs[0]):      # in place: a state's rows (the executor's plan)
        return _index_copy_rows(ctx, node, xs, dim, k, bool(sshape))
    push = (n, rank, dim, k, xs[dim], 0, _pad(xs, MAX_RANK, 1), _pad(istride, MAX_RANK), _pad(sstride, MAX_RANK),
            _pad(iext, MAX_RANK, 1))
    spec = (SCATTER_REDUCE.index(a.get("reduce", "none")), int(bool(a.get("include_self", True))))
    buffers = [ctx.buffer(x), ctx.buffer(index), ctx.buffer(src), ctx.buffer(node.outputs[0])]
    defines = [] if ctx.spec(x).dtype == "float32" else ["INT"]
    walk = k                                           # index elements an output value reads
    if a.get("along") and ctx.is_constant(index):     # a constant edge list: each position's own j's
        lists = scatter_lists(ctx.constant(index), xs[dim])
        walk = int(np.diff(lists[:xs[dim] + 1]).max(initial=0))
        buffers.append(ctx.const_buffer(lists))
        defines.append("CSR")
    elif n * k > SCATTER_SEARCH_MAX:
        raise DeviceLimit(f"scatter: {n} values each searching {k} index elements (more than "
                          f"{SCATTER_SEARCH_MAX} reads: the CPU's one pass is faster)")
    # each of PER values: its walk, its rank loop and the loops' exit tests
    ctx.device.info.check_loop_budget(PER * (walk + rank + 3), f"scatter: {PER} values an invocation each "
                                                               f"walking {walk} index elements")
    return [_elementwise(ctx, "scatter", buffers, n, push, defines or None, spec)]


INDEX_COPY_CHUNK = 64      # words an invocation of index_copy_rows writes


def _index_copy_rows(ctx, node, xs, dim, k, has_src):
    """index_copy_ into x's own buffer (vkq.executor plans a state's update there only for a
    scatter along a dim with reduce "none"): the rows named, nothing else read or written."""
    a = node.attrs
    if not a.get("along") or a.get("reduce", "none") != "none":
        raise ValueError(f"{node.name}: an in-place scatter must be index_copy's (along a dim, reduce none)")
    outer, inner = _numel(xs[:dim]), _numel(xs[dim + 1:])
    chunks = max(1, -(-inner // INDEX_COPY_CHUNK))
    ctx.device.info.check_loop_budget(INDEX_COPY_CHUNK + k, f"index_copy: {k} index elements and rows "
                                                            f"of {INDEX_COPY_CHUNK} words an invocation")
    n = outer * k * chunks
    if n == 0 or inner == 0:
        return []
    x, index, src = node.inputs
    swap = a.get("src_transpose")
    if swap and (sorted(swap) != [dim - 1, dim] or dim < 1 or not has_src):
        raise ValueError(f"{node.name}: an in-place scatter along dim {dim} reads src transposed at dims "
                         f"{dim - 1} and {dim} only, got {swap}")
    heads = xs[dim - 1] if swap else 0      # src (..., k, heads, inner): its dims dim-1 and dim swapped
    push = (outer, xs[dim], inner, k, chunks, heads)
    return [ctx.device.dispatch("index_copy_rows", [ctx.buffer(node.outputs[0]), ctx.buffer(index), ctx.buffer(src)],
                                grid_1d(n, 64), local=(64,), spec=(INDEX_COPY_CHUNK,), push=push,
                                defines=None if has_src else ["SCALAR"])]


def scatter_lists(index, size: int) -> np.ndarray:
    """A 1-D index as CSR: offsets (size + 1) into the j's naming each position, in order."""
    at = np.asarray(index, np.int64).reshape(-1)
    at = np.where(at < 0, at + size, at)
    j = np.flatnonzero((at >= 0) & (at < size))
    j = j[np.argsort(at[j], kind="stable")]
    offsets = np.searchsorted(at[j], np.arange(size + 1))
    return np.concatenate([offsets, j]).astype(np.int32)


# ---------------------------------------------------------------- registration

def _op(name, reference, build, decline, shaders, doc):
    register_op(type(name, (), {"name": name, "reference": staticmethod(reference), "build": staticmethod(build),
                                "decline": staticmethod(decline), "shaders": shaders, "__doc__": doc}))


for _name, _fn in COMPARE.items():
    _op(_name, _compare(_fn), _compare_build, _compare_decline, ("word_ops",),
        f"{_name} of two float32 or two int32 tensors (or a scalar), broadcast -> bool.")
for _name, _fn in BITWISE.items():
    _op(_name, _bitwise(_fn), int_build, _int_decline, ("word_ops",), f"{_name} of int32/bool tensors, broadcast.")
for _name in {**FLOORED, **FLOAT_BINARY}:
    _op(_name, _arith(_name), _arith_build, _arith_decline, ("word_ops",),
        f"{_name} of two tensors (or one and a scalar), broadcast: "
        + ("int32 as Python's (by 0: 0) or " if _name in FLOORED else "") + "float32 as ATen's.")
_op("logical_not", logical_not, _not_build, _int_decline, ("word_ops",), "not of a bool tensor.")
_op("cast", cast, _cast_build, _cast_decline, ("word_ops", "float_copy"),
    "dtype conversion between float32, int32 and bool (float -> int toward 0).")
_op("where", where, _where_build, _where_decline, ("word_ops",), "cond ? a : b, broadcast.")
_op("embedding", embedding, _embedding_build, _embedding_decline, ("embedding",),
    "Rows of a float32 table by int32 ids (BERT's word/position/token-type embeddings).")
_op("embedding_bag", embedding_bag, _embedding_bag_build, _embedding_bag_decline, ("embedding_bag",),
    "nn.EmbeddingBag: each bag's float32 rows summed (weighted), averaged or maxed, bags by int32 offsets.")
_op("index", index, _index_build, _index_decline, ("index",),
    "x[i0, i1, i2] by int32 index tensors computed on the device, broadcast (a padding mask's gather).")
_op("gather", gather, _gather_build, _gather_decline, ("gather",),
    "torch.gather of float32/int32 values by an int32 index computed on the device.")
_op("scatter", scatter, _scatter_build, _scatter_decline, ("scatter", "index_copy_rows"),
    "torch.scatter / scatter_add / scatter_reduce / index_add / index_copy / index_fill of float32/int32 "
    "words by an int32 index, its elements in order.")
