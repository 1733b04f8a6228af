"""aten_rules' rules for the float32 ops that have Vulkan shaders (vkq.ops.float and its
float_* modules): layer / rms / group / instance norms, softmaxes, pow by a scalar, the unary
activations and math functions, clamps, add / sub / mul / div of tensors or by a scalar (a number
or a size the graph computes), matmuls, reductions and the 2-norm; linear, conv2d / conv1d and
eval-mode batch norm (a depthwise conv); max / avg / adaptive pools and max_unpool. _FLOAT_RULES
holds the ones that vkq/aten_rules.py's CPU_RULES takes through _float_only (every tensor float,
else the CPU); the linear, conv and batch norm rules CPU_RULES names itself. Same contract as
vkq/aten_rules.py; a module of its own so that aten_rules.py stays under 800 lines (it had grown
past them), as aten_moves.py was split off before.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.fx import Node

from .passes._graph import arg, aten, dtype_of, pair, shape_of
from .passes.torch_ops import ADAPTIVE_MAX_POOL2D, MAX_UNPOOL2D


def _is_float(n) -> bool:
    """n (an FX node; other args count as float) and its tensor inputs are floating point."""
    nodes = [n] + [a for a in n.all_input_nodes]
    return all(dtype_of(x) is None or dtype_of(x).is_floating_point for x in nodes)


def _float_only(rule):
    return lambda n, t: rule(n, t) if _is_float(n) else None


def _affine(t, w, b, shape):
    """A norm's weight and bias, ones and zeros of `shape` where the model passes None."""
    w = w if w is not None else t.const(np.ones(shape, np.float32), "ones")
    return w, (b if b is not None else t.const(np.zeros(shape, np.float32), "zeros"))


def _layer_norm(n, t):
    x, shape = n.args[0], list(n.args[1])
    w, b = _affine(t, arg(n, 2, "weight"), arg(n, 3, "bias"), shape)
    eps = arg(n, 4, "eps", 1e-5)
    return "layer_norm", [x, w, b], {"normalized_shape": shape, "eps": float(eps)}


def _rms_norm(n, t):
    """rms_norm's default eps (None) is the input dtype's machine epsilon, as torch computes it."""
    x, shape = n.args[0], list(n.args[1])
    w, eps = arg(n, 2, "weight"), arg(n, 3, "eps")
    w = w if w is not None else t.const(np.ones(shape, np.float32), "ones")
    eps = float(np.finfo(np.float32).eps) if eps is None else float(eps)
    return "rms_norm", [x, w], {"normalized_shape": shape, "eps": eps}


def _instance_norm(n, t):
    """instance_norm over the input's own statistics is group_norm with one group per channel."""
    if not arg(n, 5, "use_input_stats", True):
        return None      # running statistics: a per-channel affine map (no float kernel for it)
    x = n.args[0]
    c = shape_of(x)[1]
    w, b = _affine(t, arg(n, 1, "weight"), arg(n, 2, "bias"), c)
    eps = arg(n, 7, "eps", 1e-5)
    return "group_norm", [x, w, b], {"groups": c, "eps": float(eps)}


def _group_norm(n, t):
    x, groups = n.args[0], int(n.args[1])
    w, b = _affine(t, arg(n, 2, "weight"), arg(n, 3, "bias"), shape_of(x)[1])
    eps = arg(n, 4, "eps", 1e-5)
    return "group_norm", [x, w, b], {"groups": groups, "eps": float(eps)}


def _pow(n, t):
    """pow(x, e) with a scalar exponent: `pow` (x * x for RMS norms, (x * x) * x for GPT-2's gelu,
    exp(e log|x|) for the rest: local response norm's 0.75), or the one existing op it is."""
    x, e = n.args[0], n.args[1]
    if isinstance(e, Node) or not _is_float(n):
        return None
    e = float(e)
    if e == 1:
        return "reshape", [x], {"shape": list(shape_of(n))}
    if e == -1:
        return "div", [x], {"scalar": 1.0, "scalar_first": True}
    return {0.5: ("sqrt", [x], {}), -0.5: ("rsqrt", [x], {})}.get(e, ("pow", [x], {"exponent": e}))


def _softmax(name):
    def rule(n, t):
        if arg(n, 2, "dtype") not in (None, False, torch.float32):   # softmax(x, dim, dtype=float32): Llama
            return None
        return name, [n.args[0]], {"dim": int(n.args[1])}
    return rule


def _unary(name):
    return lambda n, t: (name, [n.args[0]], {})


def _polygamma(n, t):
    """polygamma(n, x): digamma at n = 0; n < 0 is torch's error, left to the CPU."""
    order, x = n.args[0], n.args[1]
    if not isinstance(order, int) or order < 0:
        return None
    return ("digamma", [x], {}) if order == 0 else ("polygamma", [x], {"n": order})


def _leaky_relu(n, t):
    return "leaky_relu", [n.args[0]], {"negative_slope": float(arg(n, 1, "negative_slope", 0.01))}


def _elu(n, t):
    if arg(n, 2, "scale", 1) != 1 or arg(n, 3, "input_scale", 1) != 1:      # (selu's form: declined)
        return None
    return "elu", [n.args[0]], {"alpha": float(arg(n, 1, "alpha", 1.0))}


def _softplus(n, t):
    return "softplus", [n.args[0]], {"beta": float(arg(n, 1, "beta", 1.0)),
                                     "threshold": float(arg(n, 2, "threshold", 20.0))}


def _gelu(n, t):
    return "gelu", [n.args[0]], {"approximate": n.kwargs.get("approximate", arg(n, 1, "approximate", "none"))}


def _hardtanh(n, t):
    return "hardtanh", [n.args[0]], {"min_val": float(arg(n, 1, "min_val", -1.0)),
                                     "max_val": float(arg(n, 2, "max_val", 1.0))}


def _clamp(lo_name, hi_name):
    def rule(n, t):
        lo = arg(n, 1, lo_name) if lo_name else None
        hi = (arg(n, 2 if lo_name else 1, hi_name) if hi_name else None)
        if isinstance(lo, Node) or isinstance(hi, Node):
            return None
        return "clamp", [n.args[0]], {"min": None if lo is None else float(lo), "max": None if hi is None else float(hi)}
    return rule


def _scalar(t, v):
    """v as a scalar operand's attr: a number as a float, an integer FX node (a size the graph
    computes, x / (w - 1)) as itself (Translator.emit makes it its value, symbolic where it is
    a dynamic dim's); None: v is a tensor."""
    if isinstance(v, Node):
        return v if v in t.ints else None
    return float(v) if isinstance(v, (int, float)) else None


def _binary(name):
    def rule(n, t):
        a, b = n.args[0], n.args[1]
        alpha = n.kwargs.get("alpha", 1)
        sa, sb = _scalar(t, a), _scalar(t, b)
        if isinstance(a, Node) and sa is None and isinstance(b, Node) and sb is None:
            return name, [a, b], {"alpha": alpha}
        if isinstance(a, Node) and sa is None and sb is not None:
            return name, [a], {"scalar": sb, "alpha": alpha}
        if isinstance(b, Node) and sb is None and sa is not None and alpha == 1:
            return name, [b], {"scalar": sa, "scalar_first": True}
        return None
    return rule


def _linear(n, t):
    x, w = n.args[0], n.args[1]
    b = arg(n, 2, "bias")
    b = b if b is not None else t.const(np.zeros(shape_of(w)[0], np.float32), "zeros")
    return "linear", [x, w, b], {}


def _conv(n, t):
    """A float conv2d / conv1d (the op conv2d: a conv1d is one with H = 1). String padding:
    "valid", or "same" where the padding is symmetric (an odd dilated kernel extent)."""
    x, w = n.args[0], n.args[1]
    one_d = n.target in (aten.conv1d.default, aten.conv1d.padding)
    if len(shape_of(w)) != len(shape_of(x)) or len(shape_of(x)) != (3 if one_d else 4):
        return None
    stride, padding, dilation = (arg(n, 3, "stride", 1), arg(n, 4, "padding", 0), arg(n, 5, "dilation", 1))
    if one_d:
        stride, padding, dilation = ([1, *pair(v)[1:]] if not isinstance(v, str) else v
                                     for v in (stride, padding, dilation))
        if not isinstance(padding, str):
            padding[0] = 0
    stride, dilation = pair(stride), pair(dilation)
    if padding == "valid":
        padding = [0, 0]
    elif padding == "same":
        extent = [d * (k - 1) for d, k in zip(dilation, ([1] if one_d else []) + list(shape_of(w)[2:]))]
        if any(e % 2 for e in extent):
            return None      # asymmetric padding
        padding = [e // 2 for e in extent]
    b = arg(n, 2, "bias")
    b = b if b is not None else t.const(np.zeros(shape_of(w)[0], np.float32), "zeros")
    return "conv2d", [x, w, b], {"stride": stride, "padding": pair(padding), "dilation": dilation,
                                 "groups": int(arg(n, 6, "groups", 1))}


def _batch_norm(n, t):
    """Eval-mode batch norm with constant statistics and affine: x * a + b per channel (dim 1),
    a = weight / sqrt(var + eps), b = bias - mean * a (as ATen's CPU kernel computes it): the op
    conv2d as a depthwise 1x1 conv over x's own rank."""
    x = n.args[0]
    if arg(n, 5, "training", False) or len(shape_of(x)) not in (2, 3, 4):
        return None
    from .passes.fold_constants import evaluate_constant
    c = shape_of(x)[1]
    w, b, mean, var = (arg(n, i, name) for i, name in enumerate(("weight", "bias", "running_mean", "running_var"), 1))
    if mean is None or var is None:
        return None
    defaults = (np.ones(c), np.zeros(c), None, None)
    values = [d if v is None else evaluate_constant(t.gm, v) for v, d in zip((w, b, mean, var), defaults)]
    if any(v is None for v in values):
        return None          # statistics or affine computed from activations
    w, b, mean, var = (np.asarray(v, np.float64) for v in values)
    a = w / np.sqrt(var + float(arg(n, 7, "eps", 1e-5)))
    shift = b - mean * a
    rank = len(shape_of(x))
    weight = t.const(a.astype(np.float32).reshape((c, 1) + (1,) * (rank - 2)), "bn_scale")
    return "conv2d", [x, weight, t.const(shift.astype(np.float32), "bn_shift")], \
        {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": c}


def _max_pool(n, t):
    from .ops.pool import max_pool2d_params
    if len(shape_of(n.args[0])) not in (3, 4):
        return None
    stride = arg(n, 2, "stride") or None        # [] means the kernel
    return "max_pool2d", [n.args[0]], max_pool2d_params(n.args[1], stride, arg(n, 3, "padding", 0),
                                                         arg(n, 4, "dilation", 1), arg(n, 5, "ceil_mode", False))


def _avg_pool(n, t):
    from .ops.pool import avg_pool2d_geometry
    if len(shape_of(n.args[0])) not in (3, 4):
        return None
    return "avg_pool2d", [n.args[0]], avg_pool2d_geometry(
        n.args[1], arg(n, 2, "stride") or None, arg(n, 3, "padding", 0), arg(n, 4, "ceil_mode", False),
        arg(n, 5, "count_include_pad", True), arg(n, 6, "divisor_override"))


def _pool_1d(n, t):
    """max_pool1d / avg_pool1d on a float (N, C, L) x (left float by the schemes that quantize
    linears only): the 2-D pool over a (1, k) window, x seen as (C, H, W) = (N, C, L) planes."""
    from .ops.pool import avg_pool2d_geometry, max_pool2d_params
    from .passes.one_d_as_two_d import pool_args_2d
    if len(shape_of(n.args[0])) != 3:
        return None
    target, rest = pool_args_2d(n)
    if target == aten.max_pool2d.default:
        return "max_pool2d", [n.args[0]], max_pool2d_params(*rest)
    return "avg_pool2d", [n.args[0]], avg_pool2d_geometry(*rest)


def _global_average(n, t):
    """adaptive_avg_pool2d on a float x: to 1x1 the mean over H and W (float_reduce), else the
    adaptive pool (a matmul by an averaging matrix)."""
    x, size = n.args[0], n.args[1]
    size = list(size) if isinstance(size, (list, tuple)) else [size, size]
    if len(shape_of(x)) not in (3, 4):
        return None
    size = [int(s) if s is not None else d for s, d in zip(size, shape_of(x)[-2:])]
    if size == [1, 1] and len(shape_of(x)) == 4:
        return "mean", [x], {"dims": [2, 3], "keepdim": True}
    return "adaptive_avg_pool2d", [x], {"output_size": size}


def _global_average_1d(n, t):
    """adaptive_avg_pool1d on a float (N, C, L) x (a 1-D CNN's head under the float-conv
    schemes): to 1 the mean over L (any L, a dynamic one too), else the adaptive pool of x seen
    as (C, H, W) = (N, C, L) with H kept (each of its bins is one row)."""
    x, size = n.args[0], n.args[1]
    size = int(size[0] if isinstance(size, (list, tuple)) else size)
    rank = len(shape_of(x))
    if rank not in (2, 3):
        return None
    if size == 1:
        return "mean", [x], {"dims": [rank - 1], "keepdim": True}
    if rank != 3:
        return None
    return "adaptive_avg_pool2d", [x], {"output_size": [shape_of(x)[-2], size]}


def _adaptive_max(n, t):
    """vkq.adaptive_max_pool2d on a float x: to 1 x 1 the max over H and W (float_reduce, a
    parallel reduction, any size), else the adaptive max pool kernel."""
    x, size = n.args[0], [int(s) for s in n.args[1]]
    if len(shape_of(x)) < 2:
        return None
    if size == [1, 1]:
        return "amax", [x], {"dims": [-2, -1], "keepdim": True}
    return "adaptive_max_pool2d", [x], {"output_size": size}


def _max_unpool(n, t):
    """vkq.max_unpool2d on float v and x (normalize_ops made it): the op of that name (the CPU)."""
    v, x, kernel, stride, padding, dilation, ceil_mode, size = n.args
    return "max_unpool2d", [v, x], {"kernel": pair(kernel), "stride": pair(stride), "padding": pair(padding),
                                    "dilation": pair(dilation), "ceil_mode": int(bool(ceil_mode)),
                                    "output_size": list(size)}


def _reduce(name):
    def rule(n, t):
        if n.kwargs.get("dtype") is not None:
            return None
        dims = arg(n, 1, "dim")
        return name, [n.args[0]], {"dims": None if dims is None or len(dims) == 0 else [int(d) for d in dims],
                                   "keepdim": bool(arg(n, 2, "keepdim", False))}
    return rule


def _vector_norm(n, t):
    if arg(n, 1, "ord", 2) != 2 or n.kwargs.get("dtype") is not None:
        return None
    dims = arg(n, 2, "dim")
    return "vector_norm", [n.args[0]], {"dims": None if dims is None else [int(d) for d in dims],
                                        "keepdim": bool(arg(n, 3, "keepdim", False))}


_FLOAT_RULES = {
    aten.layer_norm.default: _layer_norm,
    aten.rms_norm.default: _rms_norm,
    aten.group_norm.default: _group_norm,
    aten.instance_norm.default: _instance_norm,
    aten.pow.Tensor_Scalar: _pow,
    aten.softmax.int: _softmax("softmax"), aten._softmax.default: _softmax("softmax"),
    aten.log_softmax.int: _softmax("log_softmax"), aten._log_softmax.default: _softmax("log_softmax"),
    **{getattr(aten, u).default: _unary(u) for u in
       ("sigmoid", "tanh", "relu", "silu", "exp", "neg", "abs", "sqrt", "rsqrt", "hardswish", "hardsigmoid",
        "mish", "log", "log1p", "log2", "erf", "floor", "ceil", "round", "trunc", "sign", "sin", "cos",
        "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "expm1", "exp2", "log10", "erfc",
        "lgamma", "digamma", "erfinv", "i0")},
    **{getattr(aten, f"special_{u}").default: _unary(u) for u in ("i0e", "i1", "i1e", "ndtri", "erfcx")},
    aten.special_i0.default: _unary("i0"), aten.polygamma.default: _polygamma,
    aten.leaky_relu.default: _leaky_relu, aten.elu.default: _elu, aten.softplus.default: _softplus,
    aten.gelu.default: _gelu,
    aten.hardtanh.default: _hardtanh,
    aten.clamp.default: _clamp("min", "max"), aten.clamp_min.default: _clamp("min", None),
    aten.clamp_max.default: _clamp(None, "max"),
    **{getattr(aten, b).Tensor: _binary(b) for b in ("add", "sub", "mul", "div")},
    **{getattr(aten, b).Scalar: _binary(b) for b in ("add", "sub", "mul", "div")},
    aten.matmul.default: lambda n, t: ("matmul", [n.args[0], n.args[1]], {}),
    aten.bmm.default: lambda n, t: ("bmm", [n.args[0], n.args[1]], {}),
    aten.mm.default: lambda n, t: ("matmul", [n.args[0], n.args[1]], {}),
    aten.mean.dim: _reduce("mean"), aten.mean.default: _reduce("mean"),
    aten.sum.dim_IntList: _reduce("sum"), aten.sum.default: _reduce("sum"),
    aten.linalg_vector_norm.default: _vector_norm,
    aten.amax.default: _reduce("amax"), aten.amin.default: _reduce("amin"),
    aten.max.default: _reduce("amax"), aten.min.default: _reduce("amin"),
    aten.adaptive_avg_pool2d.default: _global_average, aten.adaptive_avg_pool1d.default: _global_average_1d,
    aten.max_pool2d.default: _max_pool,
    aten.max_pool1d.default: _pool_1d, aten.avg_pool1d.default: _pool_1d,
    ADAPTIVE_MAX_POOL2D: _adaptive_max,
    MAX_UNPOOL2D: _max_unpool,
    aten.avg_pool2d.default: _avg_pool,
}
