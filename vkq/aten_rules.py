"""The translation rules for aten ops that no pass folds into a vkq op: aten op -> (vkq op, inputs,
attrs), a float32 op with a Vulkan shader (vkq.ops.float) or a CPU op (vkq.ops.cpu); an op with no
rule (or whose rule declines) becomes the generic torch_op, and fallback_reason says why it runs
on the CPU. vkq.lower's Translator applies them.

Each rule gets the node and the Translator (t.const(array) makes a constant) and returns
(op name, [input FX nodes or constant names], attrs), or None to use torch_op. The float ops
(vkq.ops.float) have float32 shaders: their rules decline (-> torch_op) unless every tensor
is float, so integer and bool arithmetic (masks, ids) stays with torch on the CPU.

The rules for the float ops (norms, activations, arithmetic, linear / conv, pools, reductions)
are in vkq/aten_float.py, those for pads, gathers, indexing and resampling in vkq/aten_moves.py;
here the views, attention, the int32 / bool word ops (ids and masks), scatters, scans, creation
ops, the tables (CPU_RULES, RULES_BY_NAME) and fallback_reason.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.fx import Node

from .ops import cpu as _cpu_ops, creation as _creation_ops, float as _float_ops  # noqa: F401  (the ops the rules emit)
from .ops.attention import default_scale
from .aten_float import _FLOAT_RULES, _batch_norm, _binary, _conv, _float_only, _is_float, _linear, _scalar
from .aten_moves import (MOVERS, _PAD_MODES, _col2im, _constant_pad, _gather, _grid_sample, _index, _remap,
                         _repeat, _take, _upsample_antialias, _upsample_bicubic, _upsample_bilinear, _upsample_nearest,
                         _word_dtype)
from .passes._graph import (DEQUANTIZE_CHANNEL, PERMUTES, QUANTIZE_CHANNEL, VIEWS, arg, aten, dtype_of, op_name,
                            shape_of, val)
from .passes.torch_ops import ADAPTIVE_MAX_POOL2D, CUMULATIVE_ARG_EXTREME, CUMULATIVE_EXTREME, EMBEDDING_BAG, MAX_UNPOOL2D

# Ops that have int8 Vulkan kernels: if one of these still runs on the CPU, it is because its
# operands were float (not quantized) or a fold rule said why not.
HAS_INT8_KERNEL = {aten.conv2d.default, aten.conv1d.default, aten.linear.default, aten.add.Tensor, aten.mul.Tensor,
                   aten.max_pool2d.default, aten.avg_pool2d.default, aten.adaptive_avg_pool2d.default,
                   ADAPTIVE_MAX_POOL2D, MAX_UNPOOL2D, aten.cat.default, aten.relu.default, aten.hardtanh.default} | VIEWS


def _reshape(n, t):
    return "reshape", [n.args[0]], {"shape": list(shape_of(n))}


def _permute(n, t):
    if n.target == aten.t.default:
        rank = len(shape_of(n.args[0]))
        return "permute", [n.args[0]], {"dims": [1, 0] if rank == 2 else list(range(rank))}
    if n.target == aten.transpose.int:
        return "transpose", [n.args[0]], {"dim0": int(n.args[1]), "dim1": int(n.args[2])}
    return "permute", [n.args[0]], {"dims": [int(d) for d in n.args[1]]}


def _expand(n, t):
    return "expand", [n.args[0]], {"shape": list(shape_of(n))}


def _cat(n, t):
    tensors = list(n.args[0])
    return "cat", tensors, {"dim": int(arg(n, 1, "dim", 0)) % len(shape_of(n))}


def _identity(n, t):
    return "reshape", [n.args[0]], {"shape": list(shape_of(n))}


def _slice(n, t):
    x = n.args[0]
    rank = len(shape_of(x))
    dim, start, end, step = (arg(n, 1, "dim", 0), arg(n, 2, "start"), arg(n, 3, "end"), arg(n, 4, "step", 1))
    if any(isinstance(v, Node) and isinstance(val(v), torch.Tensor) for v in (start, end, step)):
        return None
    step = t.int_value(step) if step is not None else 1
    if step < 1:
        return None
    size = shape_of(x)[int(dim) % rank]

    def bound(v, edge):    # torch's ints may be huge; a size of a dynamic shape stays symbolic
        if v is None or (not isinstance(v, Node) and int(v) * edge >= 2 ** 62):
            return None    # (x[:, -1:] ends at sys.maxsize: "to the end" at every size, not the example's)
        c = max(-size - 1, min(t.int_value(v), size))
        return t.dim_attr(v, c)
    return "slice", [x], {"dim": int(dim) % rank, "start": bound(start, -1), "end": bound(end, 1), "step": step}


def _narrow(n, t):
    x, dim, start, length = n.args[:4]
    if isinstance(start, Node) or isinstance(length, Node):
        return None
    rank = len(shape_of(x))
    start = int(start) % shape_of(x)[int(dim) % rank]
    return "slice", [x], {"dim": int(dim) % rank, "start": start, "end": start + int(length), "step": 1}


def _select(n, t):
    x, dim, index = n.args[:3]
    if isinstance(index, Node):
        return None
    return "select", [x], {"dim": int(dim) % len(shape_of(x)), "index": int(index)}


def _split(n, t):
    x = n.args[0]
    dim = int(arg(n, 2, "dim", 0)) % len(shape_of(x))   # split(x, size, dim), chunk(x, chunks, dim)
    return "split", [x], {"dim": dim, "sizes": [int(v.shape[dim]) for v in val(n)]}


def _unbind(n, t):
    x = n.args[0]
    return "unbind", [x], {"dim": int(arg(n, 1, "dim", 0)) % len(shape_of(x))}


def _sdpa(n, t):
    q, k, v = n.args[:3]
    mask = arg(n, 3, "attn_mask")
    dropout, causal, scale = arg(n, 4, "dropout_p", 0.0), arg(n, 5, "is_causal", False), arg(n, 6, "scale")
    if dropout or arg(n, 7, "enable_gqa", False) or any(dtype_of(a) != torch.float32 for a in (q, k, v)):
        return None
    scale = default_scale(shape_of(q)[-1]) if scale is None else float(scale)
    attrs = {"scale": scale, "causal": bool(causal), "mask_kind": "none"}
    if mask is None:
        return "scaled_dot_product_attention", [q, k, v], attrs
    if not isinstance(mask, Node):
        return None
    attrs["mask_kind"] = "float" if dtype_of(mask).is_floating_point else "bool"
    return "scaled_dot_product_attention", [q, k, v, mask], attrs


def _cached_attention(n, t):
    """vkq::cached_attention (vkq.lm_compile: a decoder's attention over its KV cache)."""
    q, k, v, positions, scale, window, softcap = n.args[:7]
    if any(dtype_of(a) != torch.float32 for a in (q, k, v)):
        return None
    return "attention_cached", [q, k, v, positions], {"scale": float(scale), "window": int(window),
                                                      "softcap": float(softcap)}


def _cached_attention_q8(n, t):
    """vkq::cached_attention_q8 (vkq.lm_compile's int8 KV cache)."""
    q, k, v, positions, scale, window, softcap, dv = n.args[:8]
    if dtype_of(q) != torch.float32 or any(dtype_of(a) != torch.int32 for a in (k, v)):
        return None
    return "attention_cached_q8", [q, k, v, positions], {"scale": float(scale), "window": int(window),
                                                         "softcap": float(softcap), "dv": int(dv)}


def _kv_quantize(n, t):
    """vkq::kv_quantize: a KV cache's new rows as int8 and a scale (vkq.ops.kv_q8)."""
    return ("kv_quantize", [n.args[0]], {}) if dtype_of(n.args[0]) == torch.float32 else None


def _index_copy_q8(n, t):
    """vkq::index_copy_q8 (vkq.passes.fuse_kv_write: an int8 KV cache's rows quantized and written)."""
    cache, dim, index, x = n.args[:4]
    if dtype_of(cache) != torch.int32 or dtype_of(x) != torch.float32 or not isinstance(index, Node):
        return None
    return "index_copy_q8", [cache, index, x], {"dim": int(dim) % len(shape_of(cache))}


def _cast(n, t):
    x = n.args[0]
    src, dst = _word_dtype(dtype_of(x)), _word_dtype(dtype_of(n))
    if src is None or dst is None:
        return None
    return "cast", [x], {"dtype": dst}


def _binary_any(name):
    """add/sub/mul of float32 or of int32 tensors, or of one and a number or a size the graph
    computes (a mix of tensor dtypes declines: the node runs on the CPU)."""
    rule = _binary(name)
    return lambda n, t: rule(n, t) if all(_word_dtype(dtype_of(a)) for a in n.all_input_nodes if a not in t.ints) \
        else None


def _unary_any(name):
    """abs / sign of a float32 or an int32 tensor (T5's relative position buckets)."""
    return lambda n, t: (name, [n.args[0]], {}) if _word_dtype(dtype_of(n)) in ("float32", "int32") \
        and _word_dtype(dtype_of(n.args[0])) == _word_dtype(dtype_of(n)) else None


def _rsub(n, t):
    """rsub(x, other, alpha) = other - alpha * x ((1 - mask) of attention masks)."""
    x, other = n.args[0], n.args[1]
    if n.kwargs.get("alpha", arg(n, 2, "alpha", 1)) != 1:
        return None
    if isinstance(other, Node) and _scalar(t, other) is None:
        return "sub", [other, x], {"alpha": 1}
    if isinstance(other, Node):
        return "sub", [x], {"scalar": other, "scalar_first": True}
    return "sub", [x], {"scalar": float(other) if dtype_of(n).is_floating_point else int(other),
                        "scalar_first": True}


def _compare(name):
    def rule(n, t):
        a, b = n.args[0], n.args[1]
        if not isinstance(a, Node) or _word_dtype(dtype_of(a)) is None:
            return None
        if isinstance(b, Node) and _scalar(t, b) is None:
            return name, [a, b], {}
        return name, [a], {"scalar": b}
    return rule


def _bitwise(name, bool_only=False):
    def rule(n, t):
        a, b = n.args[0], n.args[1]
        if bool_only and any(dtype_of(x) != torch.bool for x in n.all_input_nodes):
            return None
        if any(_word_dtype(dtype_of(x)) not in ("int32", "bool") for x in n.all_input_nodes):
            return None
        return (name, [a, b], {}) if isinstance(b, Node) else (name, [a], {"scalar": int(b)})
    return rule


def _arith(name, ints=True):
    """remainder / floor_divide / fmod of integer tensors, or of one and an integer scalar; these,
    atan2, hypot, copysign and pow of float32 tensors, or of one and a number (either first).
    div's trunc mode: trunc_divide (of integers C's division, of floats the trunc of the
    correctly rounded quotient). A mix of float and integer operands declines (the CPU)."""
    int_rule = _bitwise(name)

    def rule(n, t):
        a, b = n.args[0], n.args[1]
        op = name
        if n.target in (aten.div.Tensor_mode, aten.div.Scalar_mode) and n.kwargs.get("rounding_mode") != "floor":
            if n.kwargs.get("rounding_mode") != "trunc":
                return None
            op = "trunc_divide"
        if _word_dtype(dtype_of(n)) == "int32":
            r = int_rule(n, t) if ints and not isinstance(b, float) and isinstance(a, Node) else None
            return None if r is None else (op, *r[1:])
        tensors = [v for v in (a, b) if isinstance(v, Node)]
        if _word_dtype(dtype_of(n)) != "float32" or any(v in t.ints or _word_dtype(dtype_of(v)) != "float32"
                                                         for v in tensors):
            return None
        if len(tensors) == 2:
            return op, [a, b], {}
        number = b if tensors == [a] else a
        if not isinstance(number, (int, float)) or isinstance(number, bool):
            return None
        return op, tensors, {"scalar": float(number), **({"scalar_first": True} if tensors == [b] else {})}
    return rule


def _neg(n, t):
    """neg of a float tensor (float_unary), or of an integer one: a multiply by -1 (wrapping,
    as int32 does)."""
    if _is_float(n):
        return "neg", [n.args[0]], {}
    return ("mul", [n.args[0]], {"scalar": -1}) if _word_dtype(dtype_of(n)) == "int32" else None


def _logical_not(n, t):
    return ("logical_not", [n.args[0]], {}) if dtype_of(n.args[0]) == torch.bool else None


def _value_tensor(t, v, like):
    """A scalar operand as a 0-d constant of node like's dtype."""
    dtype = _word_dtype(dtype_of(like))
    return t.const(np.array(v, np.float32 if dtype == "float32" else np.int32), "scalar")


def _where(n, t):
    cond, a, b = n.args[:3]
    a = a if isinstance(a, Node) else _value_tensor(t, a, n)
    b = b if isinstance(b, Node) else _value_tensor(t, b, n)
    return "where", [cond, a, b], {}


def _masked_fill(n, t):
    x, mask, value = n.args[:3]
    value = value if isinstance(value, Node) else _value_tensor(t, value, n)
    return "where", [mask, value, x], {}


def _embedding(n, t):
    return "embedding", [n.args[0], n.args[1]], {}


def _embedding_bag(n, t):
    """vkq.embedding_bag of a float table (normalize_ops made it from nn.EmbeddingBag's aten op)."""
    weight, ids, offsets, mode, weights, last, pad = n.args
    if _word_dtype(dtype_of(weight)) != "float32" or len(shape_of(weight)) != 2 or mode not in (0, 1, 2):
        return None
    return "embedding_bag", [weight, ids, offsets] + ([weights] if weights is not None else []), \
        {"mode": ("sum", "mean", "max")[mode], "include_last_offset": bool(last), "padding_idx": -1 if pad is None else pad}


# the scatter family -> (reduce, along): its reduction (None: from its arguments) and whether a
# 1-D index names whole slices (index_add's form)
_SCATTERS = {aten.scatter.src: ("none", False), aten.scatter.value: ("none", False),
             aten.scatter.reduce: (None, False), aten.scatter.value_reduce: (None, False),
             aten.scatter_add.default: ("sum", False), aten.scatter_reduce.two: (None, False),
             aten.index_add.default: ("sum", True), aten.index_copy.default: ("none", True),
             aten.index_fill.int_Scalar: ("none", True), aten.index_fill.int_Tensor: ("none", True)}


def _scatter(n, t):
    """scatter / scatter_add / scatter_reduce / index_add / index_copy / index_fill of float or
    integer values by an index (computed or constant) -> the scatter op; a scalar value, a 0-d
    constant. index_add with alpha != 1, another reduction, an integer mean: the CPU."""
    from .ops.logic import SCATTER_REDUCE
    reduce, along = _SCATTERS[n.target]
    x, dim, index, src = n.args[:4]
    dtype = _word_dtype(dtype_of(n))
    if dtype not in ("float32", "int32") or _word_dtype(dtype_of(x)) != dtype or not isinstance(index, Node):
        return None
    if isinstance(src, Node) and _word_dtype(dtype_of(src)) != dtype:
        return None
    if n.target in (aten.scatter.reduce, aten.scatter.value_reduce):
        reduce = {"add": "sum", "multiply": "prod"}.get(arg(n, 4, "reduce", None))
    elif n.target == aten.scatter_reduce.two:
        reduce = arg(n, 4, "reduce", None)
    if n.target == aten.index_add.default and arg(n, 4, "alpha", 1) != 1 or reduce not in SCATTER_REDUCE \
            or (reduce == "mean" and dtype != "float32"):
        return None                 # (torch runs it: the kernel's reductions are float and int sum/prod/max/min)
    if not isinstance(src, Node):
        src = _value_tensor(t, src, n)
    return "scatter", [x, index, src], {"dim": int(dim), "reduce": reduce, "along": along,
                                        "include_self": bool(arg(n, 5, "include_self", True))}


def _arg_reduce(name):
    def rule(n, t):
        if _word_dtype(dtype_of(n.args[0])) not in ("float32", "int32"):
            return None
        dim = arg(n, 1, "dim")
        return name, [n.args[0]], {"dim": None if dim is None else int(dim), "keepdim": bool(arg(n, 2, "keepdim", False))}
    return rule


def _argsort(n, t):
    """argsort(x, dim, descending) (stable or not: the kernel's order is stable) of float32 or int32 x."""
    x = n.args[0]
    if _word_dtype(dtype_of(x)) not in ("float32", "int32"):
        return None
    if n.target == aten.argsort.stable:
        dim, descending = n.kwargs.get("dim", -1), n.kwargs.get("descending", False)
    else:
        dim, descending = arg(n, 1, "dim", -1), arg(n, 2, "descending", False)
    return "argsort", [x], {"dim": int(dim), "descending": bool(descending)}


def _scan(name):
    """cumprod (its dtype argument absent or the input's) / vkq.cumulative_extreme of float32 or int32 x."""
    def rule(n, t):
        x = n.args[0]
        if _word_dtype(dtype_of(x)) not in ("float32", "int32") or _word_dtype(dtype_of(n)) != _word_dtype(dtype_of(x)):
            return None
        op = name or ("cummax" if n.args[2] else "cummin")
        return op, [x], {"dim": int(n.args[1])}
    return rule


def _cumulative_index(n, t):
    """vkq.cumulative_arg_extreme of float32 or int32 x: cummax_indices / cummin_indices (int32)."""
    x = n.args[0]
    if _word_dtype(dtype_of(x)) not in ("float32", "int32"):
        return None
    return ("cummax_indices" if n.args[2] else "cummin_indices"), [x], {"dim": int(n.args[1])}


def _grouped_mm(n, t):
    """transformers' grouped_mm_fallback(x, w, offs) (a mixture of experts' sorted rows) of float
    tensors: grouped_matmul (offs as int32)."""
    x, w, offs = n.args[0], n.args[1], n.kwargs.get("offs", n.args[2] if len(n.args) > 2 else None)
    if not isinstance(offs, Node) or not all(_word_dtype(dtype_of(v)) == "float32" for v in (x, w)) \
            or _word_dtype(dtype_of(offs)) != "int32" or len(shape_of(x)) != 2 or len(shape_of(w)) != 3:
        return None
    return "grouped_matmul", [x, w, offs], {}


def _cumsum(n, t):
    src, dst = _word_dtype(dtype_of(n.args[0])), _word_dtype(dtype_of(n))
    dst = "int32" if dst == "bool" else dst
    if src is None or dst is None or (src == "float32" and dst != "float32"):
        return None
    return "cumsum", [n.args[0]], {"dim": int(arg(n, 1, "dim")), "dtype": dst}


# Tensors made from a shape (vkq/ops/creation.py). A static program has them as constants (folded
# before this); a dynamic one where a shape or an arange bound is a size known only at run time.
_FILLED = {aten.zeros.default: 0, aten.ones.default: 1, aten.new_zeros.default: 0, aten.new_ones.default: 1,
           aten.zeros_like.default: 0, aten.ones_like.default: 1, aten.empty.memory_format: 0,
           aten.new_empty.default: 0, aten.empty_like.default: 0}
_FILL_ARG = {aten.full.default: 1, aten.new_full.default: 2, aten.full_like.default: 1}


def _full(n, t):
    dtype = _word_dtype(dtype_of(n))
    if n.target in _FILL_ARG:
        value = arg(n, _FILL_ARG[n.target], "fill_value")
    else:
        value = _FILLED[n.target]
    if dtype is None or isinstance(value, bool) and dtype != "bool" or not isinstance(value, (bool, int, float)):
        return None
    if dtype == "int32" and not (math.isfinite(value) and value == int(value) and -2**31 <= value < 2**31):
        return None           # an int64 beyond int32's words: torch runs it
    value = bool(value) if dtype == "bool" else int(value) if dtype == "int32" else float(value)
    return "full", [], {"shape": list(shape_of(n)), "value": value, "dtype": dtype}


def _arange(n, t):
    a = list(n.args)
    start, end, step = ((0, a[0], 1) if n.target == aten.arange.default else
                        (a[0], a[1], 1) if n.target == aten.arange.start else
                        (a[0], a[1], a[2] if len(a) > 2 else 1))
    dtype = _word_dtype(dtype_of(n))
    bounds = []
    for v in (start, end, step):
        if isinstance(v, Node):
            if v not in t.ints:                 # a tensor or a symbolic float
                return None
            v = t.dim_attr(v, t.int_value(v))
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        bounds.append(v)
    if dtype not in ("float32", "int32"):
        return None
    return "arange", [], {"start": bounds[0], "end": bounds[1], "step": bounds[2], "dtype": dtype}


def _triangle(name):
    def rule(n, t):
        return name, [n.args[0]], {"diagonal": int(arg(n, 1, "diagonal", 0))}
    return rule


# ops of other libraries' namespaces (looked up by name: the library may not be imported)
RULES_BY_NAME = {"transformers.grouped_mm_fallback": _grouped_mm, "vkq.cached_attention": _cached_attention,
                 "vkq.cached_attention_q8": _cached_attention_q8, "vkq.kv_quantize": _kv_quantize,
                 "vkq.index_copy_q8": _index_copy_q8,
                 "vkq.rotary": _float_only(lambda n, t: ("rotary", list(n.args[:3]), {}))}

CPU_RULES = {
    **{target: _float_only(rule) for target, rule in _FLOAT_RULES.items()},
    aten.linear.default: _linear,
    **{c: _conv for c in (aten.conv2d.default, aten.conv2d.padding, aten.conv1d.default, aten.conv1d.padding)},
    aten.batch_norm.default: _batch_norm,
    **{v: _reshape for v in VIEWS},
    aten.unflatten.int: _reshape, aten.view_copy.default: _reshape, aten.alias_copy.default: _reshape,
    **{p: _permute for p in PERMUTES},
    aten.cat.default: _cat,
    aten.expand.default: _expand, aten.expand_as.default: _expand,
    aten.slice.Tensor: _slice, aten.narrow.default: _narrow, aten.select.int: _select,
    aten.split.Tensor: _split, aten.split_with_sizes.default: _split,
    aten.chunk.default: _split, aten.unbind.int: _unbind,
    aten.constant_pad_nd.default: _constant_pad, aten.pad.default: _constant_pad,
    **{m: _take for m in MOVERS}, aten.repeat.default: _repeat,
    **{m: _remap for m in (*_PAD_MODES, aten.flip.default, aten.roll.default)},
    aten.col2im.default: _col2im,
    aten.gather.default: _gather, aten.index.Tensor: _index, **{s: _scatter for s in _SCATTERS},
    aten.cumsum.default: _cumsum, aten.cumprod.default: _scan("cumprod"), CUMULATIVE_EXTREME: _scan(None),
    CUMULATIVE_ARG_EXTREME: _cumulative_index,
    aten.logcumsumexp.default: _scan("logcumsumexp"),
    **{f: _full for f in (*_FILLED, *_FILL_ARG)},
    **{a: _arange for a in (aten.arange.default, aten.arange.start, aten.arange.start_step)},
    aten.tril.default: _triangle("tril"), aten.triu.default: _triangle("triu"),
    aten.argmax.default: _arg_reduce("argmax"), aten.argmin.default: _arg_reduce("argmin"),
    aten.argsort.default: _argsort, aten.argsort.stable: _argsort,
    **{m: _upsample_nearest for m in (aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default,
                                      aten._upsample_nearest_exact2d.vec, aten._upsample_nearest_exact2d.default)},
    aten.scaled_dot_product_attention.default: _sdpa,
    aten.upsample_bilinear2d.vec: _upsample_bilinear, aten.upsample_bilinear2d.default: _upsample_bilinear,
    aten.grid_sampler.default: _grid_sample, aten.grid_sampler_2d.default: _grid_sample,
    **{getattr(aten, f"_upsample_{m}2d_aa").vec: _upsample_antialias for m in ("bilinear", "bicubic")},
    **{getattr(aten, f"_upsample_{m}2d_aa").default: _upsample_antialias for m in ("bilinear", "bicubic")},
    aten.upsample_bicubic2d.vec: _upsample_bicubic, aten.upsample_bicubic2d.default: _upsample_bicubic,
    **{c: _cast for c in (aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.device,
                          aten.type_as.default)},
    **{getattr(aten, b).Tensor: _binary_any(b) for b in ("add", "sub", "mul")},
    aten.maximum.default: _binary_any("maximum"), aten.minimum.default: _binary_any("minimum"),
    aten.max.other: _binary_any("maximum"), aten.min.other: _binary_any("minimum"),
    **{getattr(aten, u).default: _unary_any(u) for u in ("abs", "sign")},
    aten.reciprocal.default: lambda n, t: ("div", [n.args[0]], {"scalar": 1.0, "scalar_first": True})
    if _is_float(n) else None,
    **{getattr(aten, b).Scalar: _binary_any(b) for b in ("add", "sub", "mul")},
    aten.rsub.Scalar: _rsub, aten.rsub.Tensor: _rsub,
    **{getattr(aten, c).Tensor: _compare(c) for c in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{getattr(aten, c).Scalar: _compare(c) for c in ("eq", "ne", "lt", "le", "gt", "ge")},
    aten.bitwise_and.Tensor: _bitwise("bitwise_and"), aten.bitwise_and.Scalar: _bitwise("bitwise_and"),
    aten.__and__.Tensor: _bitwise("bitwise_and"), aten.__and__.Scalar: _bitwise("bitwise_and"),
    aten.bitwise_or.Tensor: _bitwise("bitwise_or"), aten.bitwise_or.Scalar: _bitwise("bitwise_or"),
    aten.__or__.Tensor: _bitwise("bitwise_or"), aten.__or__.Scalar: _bitwise("bitwise_or"),
    aten.bitwise_xor.Tensor: _bitwise("bitwise_xor"), aten.__xor__.Tensor: _bitwise("bitwise_xor"),
    aten.logical_and.default: _bitwise("bitwise_and", bool_only=True),
    aten.logical_or.default: _bitwise("bitwise_or", bool_only=True),
    aten.logical_not.default: _logical_not, aten.bitwise_not.default: _logical_not,
    aten.neg.default: _neg,
    **{r: _arith("remainder") for r in (aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)},
    **{f: _arith("floor_divide") for f in (aten.floor_divide.default, aten.floor_divide.Scalar,
                                           aten.div.Tensor_mode, aten.div.Scalar_mode)},
    **{f: _arith("fmod") for f in (aten.fmod.Tensor, aten.fmod.Scalar)},
    aten.atan2.default: _arith("atan2", ints=False), aten.hypot.default: _arith("hypot", ints=False),
    aten.copysign.Tensor: _arith("copysign", ints=False), aten.copysign.Scalar: _arith("copysign", ints=False),
    aten.pow.Tensor_Tensor: _arith("pow_tensor", ints=False), aten.pow.Scalar: _arith("pow_tensor", ints=False),
    aten.where.self: _where, aten.where.ScalarOther: _where, aten.where.ScalarSelf: _where,
    aten.where.Scalar: _where,
    aten.masked_fill.Scalar: _masked_fill, aten.masked_fill.Tensor: _masked_fill,
    aten.embedding.default: _embedding, EMBEDDING_BAG: _embedding_bag,
    aten.dropout.default: _identity, aten.clone.default: _identity, aten.contiguous.default: _identity,
    aten.alias.default: _identity, aten.detach.default: _identity,
}


SPECIFIC_REASONS = {
    aten.embedding.default: "a gather of table rows by int64 ids (the table stays in host memory); runs on the CPU",
}


def fallback_reason(node: Node) -> str:
    if "vkq_reject" in node.meta:
        return node.meta["vkq_reject"]
    name = op_name(node.target)
    if node.target in SPECIFIC_REASONS:
        return f"{name}: {SPECIFIC_REASONS[node.target]}"
    ints = sorted({str(dtype_of(a)).split(".")[-1] for a in [node, *node.all_input_nodes]
                   if dtype_of(a) is not None and not dtype_of(a).is_floating_point and dtype_of(a) != torch.int8})
    if node.target in (QUANTIZE_CHANNEL | DEQUANTIZE_CHANNEL):
        return (f"{name}: a tensor computed in the graph quantized per channel when the model runs (a weight "
                f"made from the input); no Vulkan kernel; runs on the CPU")
    if ints:
        return (f"{name}: no Vulkan kernel for this op on {'/'.join(ints)} tensors (ids and masks have the "
                f"kernels of vkq/ops/logic.py); runs on the CPU")
    int8_in = any(dtype_of(a) == torch.int8 for a in node.all_input_nodes)
    if int8_in or dtype_of(node) == torch.int8:
        return f"{name}: no Vulkan kernel for this op on int8 tensors; runs on the CPU"
    if node.target in HAS_INT8_KERNEL:
        return f"{name}: its operands are float (not quantized); runs in float on the CPU"
    return f"{name}: no int8 Vulkan kernel; runs in float on the CPU"
