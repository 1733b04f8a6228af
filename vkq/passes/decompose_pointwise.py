"""decompose_pointwise: decompose_ops' rules for elementwise ops that no kernel runs, rewritten
into the formulas ATen computes them with, on ops that have kernels: threshold, hardshrink /
softshrink, selu / celu (elu), rrelu at inference, log_sigmoid, heaviside, sinc, sgn,
deg2rad / rad2deg, logaddexp(2), xlogy, frac, isnan, nan_to_num, lerp, addcdiv, round(decimals),
logit, fmax / fmin, ldexp, signbit; clamp by tensor bounds and clamps of integer tensors
(maximum / minimum by constants); a float and an integer operand (the integer one cast first, as
torch's type promotion); logical ops of non-bools. A module of its own so that decompose_ops.py
stays the table and the pass (it had grown past 800 lines); decompose_ops.DECOMPOSE holds these
rules with the others.
"""
from __future__ import annotations

import math

import torch
from torch.fx import Node

from ._graph import _made, arg, aten, call_before, val


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
