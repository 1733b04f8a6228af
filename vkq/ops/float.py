"""Float32 ops on Vulkan: what a lowered model computes in float between (and around) its
int8 or dynamic-int8 kernels: the non-linear parts of a transformer encoder, its attention
matmuls, pooling and normalisation. Each op has its numpy reference (the specification) and
a build() that runs it as a float32 compute shader, so a float region stays on the device.

  layer_norm(x, weight, bias; normalized_shape, eps)     float_layer_norm
  group_norm(x, weight, bias; groups, eps)               float_layer_norm (a group a row)
  rms_norm(x, weight; normalized_shape, eps)             float_layer_norm (not centred, no bias)
  softmax / log_softmax(x; dim)                          float_softmax (LOG)
  softmax_masked(x, mask; scale)                         float_softmax (MASKED): softmax(x*scale + mask)
  gelu(x; approximate), hardtanh(x; min_val, max_val), clamp(x; min, max),
  sigmoid, tanh, relu, silu, exp, neg, abs, sqrt, rsqrt, hardswish, hardsigmoid, mish, log, log1p,
  log2, erf, floor, ceil, round, trunc, sign, sin, cos, tan, atan, asin, acos, sinh, cosh, asinh,
  acosh, atanh, expm1, exp2, log10, erfc, lgamma, digamma, erfinv, i0, i0e, i1, i1e, ndtri,
  erfcx(x), pow(x; exponent), polygamma(x; n),
  leaky_relu(x; negative_slope), elu(x; alpha),
  softplus(x; beta, threshold)                                                     float_unary
  add, sub, mul, div, maximum, minimum(a[, b]; scalar, scalar_first, alpha)
                                                              float_binary (numpy broadcasting)
  matmul, bmm(a, b)                                      float_matmul (batch dims broadcast)
  grouped_matmul(x, w, offs)   a mixture of experts' rows by expert (transformers' grouped_mm)   grouped_matmul
  matmul_strided(a, b; a_view, b_view, out_strides, out_shape)   float_matmul, in place of the
                      reshape/permute copies around an attention matmul (fold_views_into_matmul)
  sum, mean(x; dims, keepdim), vector_norm(x; dims, keepdim)   float_reduce (SUM / MEAN / NORM2)
  amax, amin(x; dims, keepdim)                           float_reduce (AMAX / AMIN): exact, NaN if any

The ops that only move values (reshape, permute, cat, slice, ...) are in vkq.ops.shape, for
every dtype; their float32/int32 dispatches use float_copy (a strided copy of words).
Inputs and outputs are float32, contiguous row-major (the executor's device layout).

How close the device comes to the reference (tests/test_float_ops.py checks each on odd
shapes on every test device):
  add, sub, mul, maximum, minimum, relu, neg, abs, clamp, hardtanh, the copies
                            bit for bit (one rounding each)
  div                       <= 2.5 ulp (Vulkan's division is not correctly rounded)
  exp, sigmoid, tanh        exp_f32: Cody-Waite + Cephes polynomial, <= 2 ulp relative (the
                            driver's exp may be 3 + 2|x| ulp, so the shaders do not use it)
  silu, rms_norm            bit for bit (float_exact.glsl's rules: silu_f32, 3 ulp from float64;
                            rms_norm's canonical sum of squares, sum_squares_canonical)
  gelu, erf                 erf_f32 (Eigen/XLA rational, float32): |error| <= 4.0e-7 on erf,
                            so <= 0.5 |x| 4e-7 + rounding on gelu
  log, softplus, mish, elu  log_f32 (Cephes logf, <= 2 ulp), log1p_f32 (Goldberg), exp_f32:
  log1p, log2               a few ulp relative, or ~1e-7 absolute near 0 (elu's exp(x) - 1);
                            log2 exact at powers of two
  pow (not 2 or 3)          exp_f32(e log_f32|x|): <= (3 + 3 |e ln|x||) ulp relative
  leaky_relu, floor, ceil, round, trunc, sign     bit for bit
  sin, cos                  sincos_f32 (Cephes): ~1e-7 absolute for |x| < 8192
  tan, atan, asin, acos,    Cephes' tanf / atanf / asinf / acosf, glibc's float asinh / acosh /
  sinh, cosh, asinh, acosh, atanh forms on log_f32 / log1p_f32, sinh / cosh / expm1 / exp2 on
  atanh, expm1, exp2, log10 exp_f32: a few ulp (tests/test_float_ops.py states each bound)
  erfc                      Numerical Recipes' erfcc, -x^2 split exactly: 6 ulp measured
  lgamma, digamma, erfinv   float_math.glsl, measured: 4 ulp (x > 0; x < 0 3 ulp + 1e-6 absolute),
                            5 ulp + 1e-6 absolute (near its zeros), 3 ulp
  softmax(_masked), log_   exp_f32, float32 sums vs float64 in the reference: ~1e-6 rel
  layer_norm, group_norm    float32 sums of the row vs float64: ~1e-6 rel
  matmul(_strided), sum,    float32 accumulation in another order: |error| <= 2 K eps sum |a b|
  mean, vector_norm

Two program rewrites for attention, run by the lowering (vkq.lower) after translation; each
turns a chain of these ops into one op whose reference computes the same values:
  fold_views_into_matmul         head split / K transpose / head merge copies -> matmul_strided
  fold_scale_mask_into_softmax   softmax(mul(scores, s) + mask) -> softmax_masked
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..device import grid_1d
from .. import packing
from ..quant import dequantize, fake_quant_push, fake_quantize, inverse_scale, quantize
from ..registry import register_op
from .special import bessel_i64, digamma64, erf64, erfc64, erfcx64, erfinv64, lgamma64, ndtri64, polygamma64
from ..vkinfo import DeviceLimit

F32 = np.float32
LOCAL = 64        # workgroup width of the elementwise and row shaders (<= every device's limit)
PER = 4           # values per invocation in the elementwise shaders
MAX_RANK = 6      # dims of an elementwise iteration after merging (push-constant arrays)
MAX_BATCH_RANK = 3
MATMUL_ROWS = (8, 16, 32)   # rows a workgroup owns: the first >= M (more rows, fewer reloads of b: on
                            # llvmpipe at L=128 attention 8 -> 32 rows took 8.6 -> 6.7 ms a matmul)
MATMUL_TN = 4               # columns a lane owns (TN in shaders/float_matmul.comp)
ROW_SUBGROUP = True    # row shaders: a subgroup a row where subgroup arithmetic exists (tests force False)
ROW_KEEP = 8           # vec4s a lane of a row shader's vec4 path keeps in registers, at most
# Row shaders on CPU drivers: a lane a row (ROW_LANE, no cross-lane reductions, no idle lanes)
# where rows are at most lane_max values (the caller's), keeping up to ROW_LANE_KEEP vec4s
# (spilled to the stack past the registers: cheaper than reading them back from the buffer).
# lavapipe at 512 bits, GPU time, idle machine, A-B twice, against a subgroup a row: softmax rows
# of 49 (9408 rows, Swin's windows) / 52 / 96 / 128 / 256: 3.9x / 3.4x / 1.9x / 1.3x / 1.0x; layer
# norm rows of 96 / 192 / 384 / 768 (49 rows): 2.0x / 1.7x / 1.4-2.2x / 0.9-1.0x (SwiftShader,
# under a test run: softmax 2.1x / - / 1.6x / 1.6x / 2.0x, layer norm 1.1x / - / 1.3x / 1.2x).
# GPUs keep a subgroup a row (its lanes on consecutive words: coalesced).
ROW_LANE = True        # (tests force False)
ROW_LANE_KEEP = 16
ROW_LANE_SOFTMAX = 128         # lane_max of softmax (not the masked one: attention's rows must give the
                               # same bits at any padded length, so one path for every length)
ROW_LANE_NORM = 512            # lane_max of layer / group norm
REDUCE_ROW = 64        # float_reduce: from this many values an output, its lanes share them


def _f(x):
    return np.asarray(x, dtype=F32)


# ---------------------------------------------------------------- numpy twins of float_math.glsl

_ERF_P = [-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02]
_ERF_Q = [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02]


def erf_f32(x):
    """The shaders' erf in float32 numpy: x P(x^2) / Q(x^2) on x clamped to [-4, 4]."""
    x = np.clip(_f(x), F32(-4), F32(4))
    x2 = x * x
    p, q = F32(_ERF_P[0]), F32(_ERF_Q[0])
    for c in _ERF_P[1:]:
        p = p * x2 + F32(c)
    for c in _ERF_Q[1:]:
        q = q * x2 + F32(c)
    return x * p / q


def exp_f32(x):
    """The shaders' exp in float32 numpy: x = n ln2 + r (Cody-Waite), Cephes' polynomial, 2^n;
    inf and 0 past float32's range, subnormals through e^(x + 24 ln 2) 2^-24."""
    x = _f(x)
    sub = x < F32(-87.33654)
    y = np.clip(np.where(sub, x + F32(16.635532333), x), F32(-87.33654), F32(88.72283))
    n = np.rint(y * F32(1.44269504089))
    r = y - n * F32(0.693359375)
    r = r + n * F32(2.12194440e-4)
    p = F32(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + F32(c)
    p = p * (r * r) + r + F32(1)
    with np.errstate(invalid="ignore"):          # (n of an inf or NaN: replaced below)
        v = np.ldexp(p, n.astype(np.int32)).astype(F32)
    v = np.where(sub, v * F32(2.0 ** -24), v)
    return np.where(x > F32(88.72283), F32(np.inf), np.where(x < F32(-103.972077), F32(0), v)).astype(F32)


def ftz(v):
    """float_exact.glsl's ftz: v, or a zero of v's sign where v is subnormal."""
    v = _f(v)
    b = v.view(np.int32)
    return np.where((b & 0x7F800000) == 0, (b & np.int32(-0x80000000)).view(F32), v).astype(F32)


def recip_newton(s):
    """float_exact.glsl's recip_newton: 1/s for float32 s in [1, 2^100] in float32 steps, a
    bit-pattern guess, two Newton steps and a third as a correction added, y + y (1 - s y)
    (every step normal on that range; past ~2^109 the correction is subnormal):
    1.21 ulp at most (linear.py's reciprocal, three plain steps for linear_rowq: 1.97)."""
    s = _f(s)
    y = (np.uint32(0x7EF311C7) - s.view(np.uint32)).view(F32)
    for _ in range(2):
        y = y * (F32(2) - s * y)
    return y + y * (F32(1) - s * y)


def silu_f32(x):
    """float_math.glsl's silu_f32, bit for bit: x * recip_newton(1 + exp_f32(-x)) (s = 1 + e past
    2^64 as 2^-64 recip_newton(s 2^-64)), a zero of x's sign where x < -87 or |x| < 2^-124 (silu(-inf) = -0)."""
    x = _f(x)
    s = F32(1) + exp_f32(-x)
    k = np.where(s > F32(2.0 ** 64), F32(2.0 ** -64), F32(1))
    y = x * (recip_newton(s * k) * k)
    tiny = (x.view(np.int32) & 0x7FFFFFFF) < 0x01800000
    return np.where((x < F32(-87)) | tiny, (x.view(np.int32) & np.int32(-0x80000000)).view(F32), y).astype(F32)


NORM_PARTS = 64     # rms_norm's partial sums of squares (16 vec4s; float_layer_norm.comp row_rms)


def sum_squares_canonical(x):
    """float_layer_norm.comp's row sum of squares, bit for bit, for x (rows, D): value j's
    square (ftz) into partial j % 64, each partial summed in index order; partials 4q..4q+3
    summed (p0 + p1) + (p2 + p3) into S_q; then the halving tree over the 16 S_q
    (S_q + S_{q+8}, + 4, + 2, + 1). Every lane count and path computes exactly this."""
    x = _f(x)
    rows, d = x.shape
    m = max(1, -(-d // NORM_PARTS))
    sq = np.zeros((rows, m * NORM_PARTS), F32)
    sq[:, :d] = ftz(x * x)
    sq = sq.reshape(rows, m, NORM_PARTS // 4, 4)
    acc = sq[:, 0]
    for i in range(1, m):
        acc = acc + sq[:, i]
    s = (acc[..., 0] + acc[..., 1]) + (acc[..., 2] + acc[..., 3])
    while s.shape[1] > 1:
        h = s.shape[1] // 2
        s = s[:, :h] + s[:, h:]
    return s[:, 0]


# ---------------------------------------------------------------- references

def layer_norm(x, weight, bias, *, normalized_shape, eps=1e-5):
    x = _f(x).astype(np.float64)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    return (y * _f(weight) + _f(bias)).astype(F32)


def rms_norm(x, weight, *, normalized_shape, eps):
    """torch's rms_norm, x / sqrt(mean(x^2) + eps) * weight over the trailing dims, as one
    sequence of float32 steps that every device computes bit for bit (float_exact.glsl):
        ss = sum_squares_canonical(x),  mean = ftz(ss * f32(1/D)),  t = mean + eps
        r = rsqrt_newton(t) (0 where t is inf),  y = ftz(ftz(ftz(x) * r) * ftz(w))
    A row holding a NaN is NaN; one whose squares overflow: 0 where x is finite (as torch)."""
    x = _f(x)
    d = _numel(normalized_shape)
    rows = x.reshape(-1, d)
    t = ftz(sum_squares_canonical(rows) * F32(1.0 / d)) + F32(eps)
    r = np.where(np.isinf(t), F32(0), rsqrt_newton(t)).astype(F32)
    y = ftz(ftz(ftz(rows) * r[:, None]) * ftz(_f(weight).reshape(-1)))
    return y.reshape(x.shape)


def softmax(x, *, dim=-1):
    x = _f(x).astype(np.float64)
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return (e / e.sum(axis=dim, keepdims=True)).astype(F32)


def softmax_masked(x, mask, *, scale=1.0):
    """softmax(x * scale + mask) along the last dim, mask broadcast to x, the product and the sum
    rounded to float32 as the separate mul and add compute them (attention's scores -> weights)."""
    return softmax(_f(x) * F32(scale) + _f(mask), dim=-1)


def log_softmax(x, *, dim=-1):
    x = _f(x).astype(np.float64)
    m = x.max(axis=dim, keepdims=True)
    return (x - m - np.log(np.exp(x - m).sum(axis=dim, keepdims=True))).astype(F32)


def gelu(x, *, approximate="none"):
    x = _f(x).astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1 + erf64(x / math.sqrt(2)).astype(np.float64))
    return y.astype(F32)


def hardtanh(x, *, min_val=-1.0, max_val=1.0):
    return np.clip(_f(x), F32(min_val), F32(max_val))


def clamp(x, *, min=None, max=None):
    """Clamp to [min, max]; either bound may be absent (clamp_min, clamp_max)."""
    y = _f(x)
    if min is not None:
        y = np.maximum(y, F32(min))
    if max is not None:
        y = np.minimum(y, F32(max))
    return y


def _exp_neg(x):
    """exp(-x) in float64, clamped at exp(700): past it sigmoid and silu round to 0 in float32
    either way, without numpy's overflow warning."""
    return np.exp(np.minimum(-_f(x).astype(np.float64), 700.0))




UNARY = {
    "sigmoid": lambda x: (1 / (1 + _exp_neg(x))).astype(F32),
    "tanh": lambda x: np.tanh(_f(x)),
    "relu": lambda x: np.maximum(_f(x), F32(0)),
    "silu": silu_f32,       # bit-exact (silu(-inf) = -0 where torch's is NaN)
    "exp": lambda x: np.exp(_f(x)),
    "neg": lambda x: -_f(x),
    "abs": lambda x: np.abs(_f(x)),
    "sqrt": lambda x: np.sqrt(_f(x)),
    "rsqrt": lambda x: (1 / np.sqrt(_f(x).astype(np.float64))).astype(F32),
    "hardswish": lambda x: _f(x) * np.clip(_f(x) + F32(3), F32(0), F32(6)) / F32(6),
    "hardsigmoid": lambda x: np.clip(_f(x) + F32(3), F32(0), F32(6)) / F32(6),
    "mish": lambda x: (_f(x) * np.tanh(_softplus64(x, 1.0, 20.0))).astype(F32),
    "log": lambda x: np.log(_f(x).astype(np.float64)).astype(F32),
    "log1p": lambda x: np.log1p(_f(x).astype(np.float64)).astype(F32),
    "log2": lambda x: np.log2(_f(x).astype(np.float64)).astype(F32),
    "erf": lambda x: erf64(x).astype(F32),
    "floor": lambda x: np.floor(_f(x)),
    "ceil": lambda x: np.ceil(_f(x)),
    "round": lambda x: np.round(_f(x)),      # half to even, as torch.round
    "trunc": lambda x: np.trunc(_f(x)),
    "sign": lambda x: np.where(np.isnan(_f(x)), F32(0), np.sign(_f(x))),     # (torch.sign(NaN) = 0)
    "sin": lambda x: np.sin(_f(x).astype(np.float64)).astype(F32),
    "cos": lambda x: np.cos(_f(x).astype(np.float64)).astype(F32),
    **{name: (lambda fn: lambda x: _f64(fn, x))(fn) for name, fn in (
        ("atan", np.arctan), ("asin", np.arcsin), ("acos", np.arccos), ("tan", np.tan), ("sinh", np.sinh),
        ("cosh", np.cosh), ("asinh", np.arcsinh), ("acosh", np.arccosh), ("atanh", np.arctanh),
        ("expm1", np.expm1), ("exp2", np.exp2), ("log10", np.log10), ("erfc", erfc64),
        ("lgamma", lgamma64), ("digamma", digamma64), ("erfinv", erfinv64), ("ndtri", ndtri64),
        ("erfcx", erfcx64))},
    **{name: (lambda order, scaled: lambda x: _f64(lambda v: bessel_i64(v, order, scaled), x))(order, scaled)
       for name, order, scaled in (("i0", 0, False), ("i0e", 0, True), ("i1", 1, False), ("i1e", 1, True))},
}


def _f64(fn, x):
    """fn of x in float64, rounded to float32 (out of its domain NaN, overflow inf: no warnings)."""
    with np.errstate(all="ignore"):
        return fn(_f(x).astype(np.float64)).astype(F32)


def _softplus64(x, beta, threshold):
    x = _f(x).astype(np.float64)
    bx = x * np.float64(F32(beta))
    return np.where(bx > threshold, x, np.log1p(np.exp(np.minimum(bx, 700.0))) / np.float64(F32(beta)))


def softplus(x, *, beta=1.0, threshold=20.0):
    """torch's softplus: x where beta x > threshold, else log(1 + exp(beta x)) / beta."""
    return _softplus64(x, beta, threshold).astype(F32)


def leaky_relu(x, *, negative_slope=0.01):
    x = _f(x)
    return np.where(x > 0, x, x * F32(negative_slope))


def elu(x, *, alpha=1.0):
    x = _f(x)
    return np.where(x > 0, x, (F32(alpha) * np.expm1(np.minimum(x, 0).astype(np.float64))).astype(F32))


def _integral(v) -> bool:
    return v is None or float(v) == int(v)


def pow_(x, *, exponent):
    """x ** exponent for a scalar exponent; 2 and 3 as ATen computes them ((x * x) * x)."""
    x = _f(x)
    if exponent == 2:
        return x * x
    if exponent == 3:
        return (x * x) * x
    return np.power(x.astype(np.float64), float(exponent)).astype(F32)


def polygamma(x, *, n):
    """The n-th derivative of digamma (n = 0: digamma itself)."""
    if isinstance(n, bool) or not isinstance(n, (int, float)) or n != int(n) or not 0 <= n <= 170:
        raise ValueError(f"polygamma: n = {n}, not an integer in 0..170")
    return _f64(lambda v: polygamma64(v, int(n)) if n else digamma64(v), x)


def _polygamma_decline(node, tensors):
    n = node.attrs.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 34:
        return None
    return f"polygamma: n = {n} outside 1..34 (the kernel scales by n!, which passes FLT_MAX from 35!)"


def _pow_variant(attrs):
    return {2: "OP_SQUARE", 3: "OP_CUBE"}.get(attrs["exponent"], "OP_POW")


def _fq(y, fq):
    """A float op's result through its folded fake_quantize (attr fq: fold_fake_quantize)."""
    return y if not fq else fake_quantize(y, **fq)


def _binary(fn):
    def reference(a, b=None, *, scalar=None, scalar_first=False, alpha=1, fq=None):
        if fn is not np.divide and np.asarray(a).dtype.kind in "iub" and _integral(alpha) and (
                np.asarray(b).dtype.kind in "iub" if b is not None else _integral(scalar)):
            a64 = np.asarray(a, np.int64)       # int32 tensors (ids, masks): integer arithmetic, wrapping
            other = np.int64(scalar) if b is None else np.asarray(b, np.int64)
            other = other * int(alpha)
            r = fn(other, a64) if (b is None and scalar_first) else fn(a64, other)
            return r.astype(np.int32)
        a = _f(a)
        other = F32(scalar) if b is None else _f(b)
        if alpha != 1:
            other = other * F32(alpha)
        return _fq(fn(other, a) if (b is None and scalar_first) else fn(a, other), fq)
    return reference


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum}    # (NaN-propagating, as torch's)


def matmul(a, b, *, fq=None):
    return _fq(np.matmul(_f(a), _f(b)), fq)


def grouped_matmul(x, w, offs):
    """A mixture of experts' grouped matmul (transformers' grouped_mm_fallback): x (S, K) with its
    rows sorted by expert, w (E, K, N), offs (E,) the end of each expert's rows; rows past the
    last offset are 0."""
    x, w, offs = _f(x), _f(w), np.asarray(offs, np.int64)
    out, start = np.zeros((x.shape[0], w.shape[2]), F32), 0
    for e, end in enumerate(np.minimum(offs, x.shape[0])):
        if end > start:
            out[start:end] = x[start:end] @ w[e]
        start = max(start, int(end))
    return out


def _view(x, shape, strides, offset=0):
    """The strided view (element strides, from element `offset`) of x's row-major values."""
    flat = np.ascontiguousarray(x).reshape(-1)[int(offset):]
    return np.lib.stride_tricks.as_strided(flat, tuple(shape), tuple(s * flat.itemsize for s in strides))


def matmul_strided(a, b, *, a_view, b_view, out_strides, out_shape, fq=None):
    """np.matmul of strided views of a's and b's values, written into out (shape out_shape)
    through out_strides:  views are [shape, strides] in elements, offset 0, e.g. the heads of
    a (1, L, 384) projection as (1, 12, L, 32) with strides (L*384, 32, 384, 1). What a chain
    of reshape/permute copies around a matmul computes (fold_views_into_matmul), without them."""
    r = np.matmul(_view(_f(a), *a_view), _view(_f(b), *b_view))
    out = np.zeros(int(np.prod(out_shape, dtype=np.int64)), F32)
    _view(out, r.shape, out_strides)[...] = r   # a view of out's own buffer: writes land in out
    return _fq(out.reshape(out_shape), fq)


def _axes(dims):
    return None if dims is None else tuple(dims)


def mean(x, *, dims=None, keepdim=False):
    return _f(x).astype(np.float64).mean(axis=_axes(dims), keepdims=keepdim).astype(F32)


def sum_(x, *, dims=None, keepdim=False):
    return _f(x).astype(np.float64).sum(axis=_axes(dims), keepdims=keepdim).astype(F32)


def amax(x, *, dims=None, keepdim=False):
    return np.max(_f(x), axis=_axes(dims), keepdims=keepdim)      # (a NaN propagates, as torch's)


def amin(x, *, dims=None, keepdim=False):
    return np.min(_f(x), axis=_axes(dims), keepdims=keepdim)


def vector_norm(x, *, dims=None, keepdim=False):
    """The 2-norm over dims: sqrt(sum x^2) (linalg_vector_norm with ord 2)."""
    x = _f(x).astype(np.float64)
    return np.sqrt((x * x).sum(axis=_axes(dims), keepdims=keepdim)).astype(F32)


# ---------------------------------------------------------------- strides: what the shaders index with

def strides_of(shape) -> list:
    """Row-major element strides of a contiguous tensor."""
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= int(d)
    return out[::-1]


def broadcast_strides(shape, out_shape, strides=None) -> list:
    """Strides that read `shape` (with `strides`, default contiguous) at every index of
    out_shape under numpy broadcasting: 0 along the dims it is broadcast over."""
    strides = strides_of(shape) if strides is None else list(strides)
    lead = len(out_shape) - len(shape)
    if lead < 0:
        raise ValueError(f"cannot broadcast {tuple(shape)} to {tuple(out_shape)}")
    res = []
    for d, od in enumerate(out_shape):
        k = d - lead
        if k < 0 or (shape[k] == 1 and od != 1):
            res.append(0)
        elif shape[k] == od:
            res.append(strides[k])
        else:
            raise ValueError(f"cannot broadcast {tuple(shape)} to {tuple(out_shape)}")
    return res


def merge_dims(shape, *strides):
    """Drop size-1 dims and merge neighbours that are contiguous in every stride list
    (s[d] == s[d+1] * shape[d+1]), keeping the row-major order of the iteration. Returns
    (shape, [strides, ...]); a scalar iteration is ([1], [[0], ...])."""
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    out_shape, out_strides = [], [[] for _ in strides]
    for d in dims:
        if out_shape and all(st[-1] == s[d] * shape[d] for st, s in zip(out_strides, strides)):
            out_shape[-1] *= shape[d]
            for st, s in zip(out_strides, strides):
                st[-1] = s[d]
            continue
        out_shape.append(int(shape[d]))
        for st, s in zip(out_strides, strides):
            st.append(int(s[d]))
    if not out_shape:
        return [1], [[0] for _ in strides]
    return out_shape, out_strides


def _pad(values, n, fill=0) -> list:
    values = list(values)
    return values + [fill] * (n - len(values))


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _check(ctx, node, dtypes=("float32",)):
    for t in list(node.inputs) + list(node.outputs):
        spec = ctx.spec(t)
        if spec.dtype not in dtypes:
            raise ValueError(f"{node.name}: {node.op} on Vulkan takes {'/'.join(dtypes)} tensors; "
                             f"{t!r} is {spec.dtype}")


def _elementwise(ctx, shader, buffers, n, push, defines=None, spec=()):
    """spec: specialization constants after PER (ids 4, ...)."""
    return ctx.device.dispatch(shader, buffers, grid_1d(-(-n // PER), LOCAL), local=(LOCAL,),
                               spec=(PER, *spec), push=push, defines=defines)


def _row_dispatch(ctx, shader, buffers, rows: int, d: int, push, defines=(), vec4s=None, vec=False, center=None,
                  passes: int = 3, per_step: int = 1, lane_max: int = 0, lane_group: int = 1, spec_from_7=(),
                  parts: int = 0):
    """A row shader: a lane a row on CPU drivers where a row is at most lane_max values
    (ROW_LANE; 0: the shader has no such variant), else a subgroup a row where the device has
    subgroup arithmetic (ROW_SUBGROUP, no barriers), else a workgroup a row (a power of two <=
    LOCAL, <= the row length rounded up). lane_group: under ROW_LANE a lane owns that many
    consecutive rows (float_softmax's VEC 3 row groups).
    Rows are grid-strided in the shader, so the workgroup count only has to be <= the limit.
    vec4s: a row's vec4s, for a shader that keeps a lane's share of them in registers
    (specialization constant 4: that share, at most ROW_KEEP, ROW_LANE_KEEP under ROW_LANE;
    5: vec, its vec4 loads and stores; shaders/include/float_workgroup.glsl); center:
    float_layer_norm's mean subtraction (6; off: rms_norm); spec_from_7: the shader's own
    (float_reduce's ranks), 4-6 filled with their defaults where unused. passes, per_step: a lane reads its
    share of a row `passes` times, `per_step` values a loop iteration (vec: 4). Where that passes
    the device's loop budget (llvmpipe: vkinfo.DeviceInfo.loop_budget, past which values are
    left out silently), a workgroup owns each row, as wide as the device allows; past even that,
    DeviceLimit (the node runs on the CPU).
    parts: a shader that sums its rows in a canonical order over this many partials (rms_norm:
    16 vec4s), at most that many lanes of a row holding them: a workgroup a row is no wider, the
    loop count is reckoned over those lanes, a subgroup a row needs shuffles (its tree), and
    specialization constants 7, 8 get (the lanes that hold partials, the partials each holds)."""
    info = ctx.device.info
    sg, step = int(info.subgroup_size), 4 if vec else per_step
    limit = info.loop_budget or math.inf
    widest = min(info.max_workgroup_invocations, info.max_workgroup_size[0])

    def owner(width, per_group, owners=rows, values=d):   # (width, rows a workgroup, workgroups, a lane's loop iterations)
        groups = min(max(1, -(-owners // per_group)), info.max_workgroup_count[0])
        lanes = width // per_group
        lanes = min(lanes, parts) if parts else lanes
        rows_each = -(-owners // (groups * per_group))
        # each pass over its share and the exit test of each; a workgroup's row: its two
        # reductions over the lanes (float_workgroup.glsl: log2(lanes) + 1 iterations each)
        trees = 2 * lanes.bit_length() if per_group == 1 and lanes > 1 else 0
        return width, per_group, groups, rows_each * (passes * (-(-values // (lanes * step)) + 1) + trees + 1) + 1

    # a row a subgroup needs every lane of it: full subgroups (vkinfo.fixed_subgroups)
    by_subgroup = ROW_SUBGROUP and "arithmetic" in info.subgroup_operations and info.fixed_subgroups \
        and 1 < sg <= LOCAL and (not parts or info.shuffle_lanes)
    by_lane = ROW_LANE and info.type == "cpu" and d <= lane_max
    if by_lane:
        variant, (width, per_group, groups, loops) = "ROW_LANE", owner(LOCAL, LOCAL, -(-rows // lane_group),
                                                                          d * lane_group)
        by_lane = loops <= limit
    if by_subgroup and not by_lane:
        variant, (width, per_group, groups, loops) = "ROW_SUBGROUP", owner(LOCAL, LOCAL // sg)
    if not (by_subgroup or by_lane) or loops > limit:
        width = 1
        while width < min(LOCAL, d, parts or LOCAL) and width * 2 <= widest:
            width *= 2
        variant, (width, per_group, groups, loops) = "ROW_WORKGROUP", owner(width, 1)
        while loops > limit and width * 2 <= widest and not parts:    # a long row: more lanes share it
            width, per_group, groups, loops = owner(width * 2, 1)
    if loops > limit:
        raise DeviceLimit(f"{shader}: rows of {d} values take {loops} loop iterations a lane on {info.name} "
                          f"(in {width}-lane workgroups, its widest), past its limit of {limit} "
                          "(Mesa's loop limiter would leave values out silently)")
    lanes = width // per_group                       # a row's lanes
    kept = ROW_LANE_KEEP if variant == "ROW_LANE" else ROW_KEEP
    keep = () if vec4s is None else (min(kept, max(1, -(-vec4s // lanes))), int(vec))
    keep += () if center is None else (int(center),)
    if parts:
        held = min(lanes, parts)
        spec_from_7 = (held, parts // held)
    spec = (width, *keep) + (((1, 0, 1)[len(keep):] + tuple(spec_from_7)) if spec_from_7 else ())
    return ctx.device.dispatch(shader, buffers, (groups, 1, 1), local=(width,), spec=spec, push=push,
                               defines=[variant, *defines])


# ---------------------------------------------------------------- builds

def _unary_build(variant, bounds=lambda attrs: (-np.inf, np.inf)):
    def build(ctx, node):
        _check(ctx, node)
        x, y = node.inputs[0], node.outputs[0]
        n = _numel(ctx.spec(y).shape)
        if ctx.spec(x).shape != ctx.spec(y).shape:
            raise ValueError(f"{node.name}: elementwise {node.op} needs equal in/out shapes")
        v = variant(node.attrs) if callable(variant) else variant
        lo, hi = bounds(node.attrs)
        return [_elementwise(ctx, "float_unary", [ctx.buffer(x), ctx.buffer(y)], -(-n // 4),   # vec4 blocks
                             (n, F32(lo), F32(hi)), [v])]
    return build


# abs and sign of int32 tensors too (T5's and DeBERTa's relative position buckets): word_ops
INT_UNARY = {"abs": np.abs, "sign": np.sign}


def _int_unary(fn, int_fn):
    def reference(x):
        x = np.asarray(x)
        return int_fn(x.astype(np.int32)) if x.dtype.kind in "iu" else fn(x)     # (abs wraps at INT_MIN)
    return reference


def _int_unary_build(name):
    float_build = _unary_build(f"OP_{name.upper()}")

    def build(ctx, node):
        if ctx.spec(node.outputs[0]).dtype == "int32":
            from .logic import word_dispatch
            return [word_dispatch(ctx, f"I_{name.upper()}", node.outputs[0], node.inputs[:1])]
        return float_build(ctx, node)
    return build


def _int_unary_decline(node, tensors):
    dtypes = {tensors[t].dtype for t in node.inputs + node.outputs}
    if len(dtypes) == 1 and dtypes <= {"float32", "int32"}:
        return None
    return f"{node.op}: tensors of dtypes {sorted(dtypes)} (the kernels take all float32 or all int32)"


def _bound(v, default):
    return default if v is None else v


_GELU_VARIANT = {"none": "OP_GELU", "tanh": "OP_GELU_TANH"}


def _gelu_variant(attrs):
    approx = attrs.get("approximate", "none")
    if approx not in _GELU_VARIANT:
        raise ValueError(f"gelu: unknown approximate={approx!r}")
    return _GELU_VARIANT[approx]


def _binary_decline(node, tensors):
    dtypes = {tensors[t].dtype for t in node.inputs + node.outputs}
    if dtypes == {"float32"}:
        return None
    if dtypes == {"int32"} and node.op != "div":
        from .logic import int_decline
        return int_decline(node, tensors)
    return f"{node.op}: tensors of dtypes {sorted(dtypes)} (the kernels take all float32 or all int32)"


def _binary_build(variant):
    def build(ctx, node):
        if ctx.spec(node.outputs[0]).dtype == "int32":
            from .logic import int_build
            return int_build(ctx, node)
        _check(ctx, node)
        at, out = node.attrs, node.outputs[0]
        oshape = ctx.spec(out).shape
        a = node.inputs[0]
        sa = broadcast_strides(ctx.spec(a).shape, oshape)
        if len(node.inputs) == 2:
            b, mode, scalar = node.inputs[1], 0, 0.0
            sb = broadcast_strides(ctx.spec(b).shape, oshape)
        else:
            b, mode, scalar = a, 2 if at.get("scalar_first") else 1, at["scalar"]
            sb = [0] * len(oshape)
        shape, (sa, sb) = merge_dims(oshape, sa, sb)
        if len(shape) > MAX_RANK:
            raise ValueError(f"{node.name}: broadcasting over {len(shape)} dims (the shader takes {MAX_RANK})")
        n = _numel(oshape)
        push = (n, len(shape), mode, F32(scalar), F32(at.get("alpha", 1)),
                _pad(shape, MAX_RANK, 1), _pad(sa, MAX_RANK), _pad(sb, MAX_RANK), *fake_quant_push(at.get("fq")))
        contig = len(shape) == 1 and sa == [1] and (sb == [1] or mode != 0)
        rows = not contig and sa[-1] == 1 and (sb[-1] in (0, 1) or mode != 0)   # (float_binary.comp ROWS)
        flat = rows and mode == 0 and sa == strides_of(shape) and shape[-1] >= 4   # a the output's shape: FLAT
        work = -(-n // 4) if contig or flat else n // shape[-1] * -(-shape[-1] // 4) if rows else n
        return [_elementwise(ctx, "float_binary", [ctx.buffer(a), ctx.buffer(b), ctx.buffer(out)], work, push,
                             [variant] + (["CONTIG"] if contig else ["FLAT"] if flat else ["ROWS"] if rows else []),
                             spec=(1 if at.get("fq") else 0,))]
    return build


def _grouped_matmul_decline(node, tensors):
    x, w, offs = (tensors[t] for t in node.inputs)
    if x.dtype != "float32" or w.dtype != "float32" or offs.dtype != "int32" or len(x.shape) != 2 \
            or len(w.shape) != 3 or len(offs.shape) != 1:
        return (f"grouped_matmul: x {x.dtype}{list(x.shape)}, w {w.dtype}{list(w.shape)}, offs "
                f"{offs.dtype}{list(offs.shape)} (the kernel takes float32 (S, K), (E, K, N) and int32 (E,))")
    return None


def _grouped_matmul_build(ctx, node):
    x, w, offs = node.inputs
    (s, k), (e, k2, n), (e2,) = ctx.spec(x).shape, ctx.spec(w).shape, ctx.spec(offs).shape
    if k2 != k or e2 != e or ctx.spec(node.outputs[0]).shape != (s, n):
        raise ValueError(f"{node.name}: grouped_matmul of x {(s, k)} by w {(e, k2, n)} with {e2} offsets")
    ctx.device.info.check_loop_budget(k + e, f"{node.op}: dots of {k} products, one loop iteration each")
    total = s * n
    return [_elementwise(ctx, "grouped_matmul", [ctx.buffer(t) for t in (x, w, offs, node.outputs[0])], total,
                         (total, k, n, e))]


def _layer_norm_build(ctx, node):
    """layer_norm, and rms_norm (no bias input) as the same shader with the centring compiled
    out (specialization constant 6) and its bias a constant of zeros."""
    _check(ctx, node)
    x, w, *b = node.inputs
    y = node.outputs[0]
    d = _numel(node.attrs["normalized_shape"])
    n = _numel(ctx.spec(x).shape)
    if _numel(ctx.spec(w).shape) != d or (b and _numel(ctx.spec(b[0]).shape) != d) or n % max(d, 1):
        raise ValueError(f"{node.name}: {node.op} weight/bias must have the normalized_shape's {d} values")
    rows = n // d
    bias = ctx.buffer(b[0]) if b else ctx.const_buffer(np.zeros(d, F32), F32)
    exact = {} if b else dict(parts=NORM_PARTS // 4, passes=2, per_step=4)   # rms_norm: canonical order
    return [_row_dispatch(ctx, "float_layer_norm", [ctx.buffer(x), ctx.buffer(w), bias, ctx.buffer(y)],
                          rows, d, (rows, d, F32(node.attrs.get("eps", 1e-5)), 1, d, 1, *_NOT_Q8, F32(1.0 / d)),
                          vec4s=d // 4, vec=d % 4 == 0, center=not not b, lane_max=ROW_LANE_NORM, **exact)]


_NOT_Q8 = (1, F32(1.0), 0, F32(1.0), 0, -128, 127)     # float_layer_norm's Q8 push constants, unused


LAYER_NORM_Q8_MAX_D = (1 << 31) // (128 * 128)     # S2 = sum (x - x_zp)^2 stays an int32


def layer_norm_q8_constants(d: int, x_scale: float) -> tuple:
    """float32(1 / D^2), float32(x_scale^2), float32(x_scale / D): the host's share of
    layer_norm_q8, pushed to the shader as these bits."""
    return F32(1.0 / (d * d)), F32(float(x_scale) ** 2), F32(float(x_scale) / d)


def rsqrt_newton(t):
    """1 / sqrt(t) for float32 t > 0 (normal) to ~1 ulp in float32 steps alone: a bit-pattern
    seed, two Newton steps and a third written as a correction added to y (y + y (1/2 - t y^2 / 2)
    rather than y (3/2 - t y^2 / 2): 1.2 ulp at most instead of 2.1), as float_layer_norm.comp's
    rsqrt_newton (inversesqrt is 2 ulp at best, and not the same bits on two devices)."""
    t = np.asarray(t, F32)
    y = (np.int32(0x5F375A86) - (t.view(np.int32) >> 1)).view(F32)
    h = F32(0.5) * t
    for _ in range(2):
        y = y * (F32(1.5) - h * y * y)
    return y + y * (F32(0.5) - h * y * y)


def layer_norm_q8(x, weight, bias, *, normalized_shape, eps, x_scale, x_zp, out_scale, out_zp, qmin, qmax):
    """dequantize -> layer_norm -> quantize (the static int8 graph's float island) as one op,
    computed so that every device gives these bits (shaders/float_layer_norm.comp Q8): with
    e = x - x_zp, the row's S1 = sum e and D^2 var = D sum e^2 - S1^2 are integers (exact, in any
    order); then float32 steps, each correctly rounded:
        t = vd / D^2 * x_scale^2 + eps,  k = rsqrt_newton(t) * (x_scale / D)
        y = (e D - S1) * k * w + b,  quantized.
    PT2E's float32 layer norm rounds differently: within one step of it."""
    x = np.asarray(x)
    d = x.shape[-1]
    if _numel(normalized_shape) != d or d > LAYER_NORM_Q8_MAX_D:
        raise ValueError(f"layer_norm_q8 normalizes one last dim of at most {LAYER_NORM_Q8_MAX_D} values, "
                         f"got {list(normalized_shape)} of {x.shape}")
    inv_d2, x_scale2, x_scale_d = layer_norm_q8_constants(d, x_scale)
    e = x.astype(np.int64) - int(x_zp)
    s1 = e.sum(-1, keepdims=True)
    v = d * (e * e).sum(-1, keepdims=True) - s1 * s1
    hi, lo = v >> 32, v & 0xFFFFFFFF
    vd = (hi.astype(F32) * F32(2.0 ** 32) + (lo >> 16).astype(F32) * F32(65536.0)) + (lo & 0xFFFF).astype(F32)
    t = vd * inv_d2 * x_scale2 + F32(eps)
    k = rsqrt_newton(t) * x_scale_d
    y = (e * d - s1).astype(F32) * k * _f(weight).reshape(-1) + _f(bias).reshape(-1)
    return quantize(y, out_scale, out_zp, qmin, qmax)


def _layer_norm_q8_decline(node, tensors):
    shape, d = tensors[node.inputs[0]].shape, _numel(node.attrs["normalized_shape"])
    if len(shape) > 4 or len(node.attrs["normalized_shape"]) != 1 or d % 4 or d > LAYER_NORM_Q8_MAX_D:
        return (f"{node.op}: rank <= 4 and one normalized dim of a multiple of 4 values, at most "
                f"{LAYER_NORM_Q8_MAX_D}, got {shape} over {d}")
    return None


def _layer_norm_q8_build(ctx, node):
    x, w, b = node.inputs
    a = node.attrs
    n, c, h, d = packing.as_nchw(ctx.spec(x).shape)
    if _numel(ctx.spec(w).shape) != d or _numel(ctx.spec(b).shape) != d:
        raise ValueError(f"{node.name}: layer_norm_q8 weight/bias must have {d} values")
    rows = n * c * h
    push = (rows, d, F32(a["eps"]), 1, d, 1, h, F32(a["x_scale"]), a["x_zp"], inverse_scale(a["out_scale"]),
            a["out_zp"], a["qmin"], a["qmax"], *layer_norm_q8_constants(d, a["x_scale"]))
    return [_row_dispatch(ctx, "float_layer_norm", [ctx.buffer(x), ctx.buffer(w), ctx.buffer(b),
                                                    ctx.buffer(node.outputs[0])],
                          rows, d, push, defines=["Q8"], vec4s=d // 4, vec=True, center=True,
                          lane_max=ROW_LANE_NORM, passes=3 + (3 - ((h - 1) & 3)))]   # + zeroing the rows past H


@register_op
class LayerNormQ8:
    """Layer norm of an int8 tensor to an int8 tensor over its last dim (4H4W rows): the
    dequantize, the float layer norm and the quantize of PT2E's graph in one pass
    (float_layer_norm Q8; fold_qdq_patterns makes it). Integer row statistics and correctly
    rounded float32 steps: the same bits as the reference on every device."""
    name = "layer_norm_q8"
    shaders = ("float_layer_norm",)
    layouts = ("4H4W",)
    reference = staticmethod(layer_norm_q8)
    build = staticmethod(_layer_norm_q8_build)
    decline = staticmethod(_layer_norm_q8_decline)


def group_norm(x, weight, bias, *, groups, eps=1e-5):
    """Normalise each group of C/groups channels of each image over its channels and positions,
    then a per-channel affine (torch.nn.GroupNorm)."""
    x = _f(x).astype(np.float64)
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return (y * _f(weight).reshape(shape) + _f(bias).reshape(shape)).astype(F32)


def _group_norm_build(ctx, node):
    _check(ctx, node)
    x, w, b = node.inputs
    shape, groups = ctx.spec(x).shape, node.attrs["groups"]
    n, c = shape[:2]
    hw = _numel(shape[2:])
    if c % groups or _numel(ctx.spec(w).shape) != c or _numel(ctx.spec(b).shape) != c:
        raise ValueError(f"{node.name}: group_norm of {c} channels in {groups} groups, weight/bias of {c}")
    rows, d = n * groups, c // groups * hw
    return [_row_dispatch(ctx, "float_layer_norm", [ctx.buffer(x), ctx.buffer(w), ctx.buffer(b),
                                                    ctx.buffer(node.outputs[0])],
                          rows, d, (rows, d, F32(node.attrs.get("eps", 1e-5)), groups, c // groups, hw, *_NOT_Q8, F32(1.0)),
                          vec4s=d // 4, vec=hw == 1 and d % 4 == 0, lane_max=ROW_LANE_NORM)]


_NO_MASK = (1.0, 0, 0, [1, 1, 1], [0, 0, 0])   # scale, mrank, mj, mshape, mstride


def _softmax_build(defines):
    def build(ctx, node):
        _check(ctx, node)
        x, y = node.inputs[0], node.outputs[0]
        shape = ctx.spec(x).shape
        dim = node.attrs.get("dim", -1) % len(shape)
        d, inner = shape[dim], _numel(shape[dim + 1:])
        rows = _numel(shape) // max(d, 1)
        bufs = [ctx.buffer(x), ctx.buffer(y)]
        # float_softmax.comp: rows on vec4s (VEC 1); packed rows of other lengths through the
        # buffers' own vec4s where both are whole vec4s (VEC 3); else value by value
        vec = 0 if inner != 1 else 1 if d % 4 == 0 else 3 if all(b.size % 4 == 0 for b in bufs) else 0
        span = d + 3 * (vec == 3)      # VEC 3: a row's vec4s may start 3 words before it (the loop budget)
        # ROW_LANE: 4 rows a lane where float_softmax.comp's main() takes row_group (the same test)
        group = 4 if vec == 3 and d % 2 and d >= 5 else 1
        return [_row_dispatch(ctx, "float_softmax", bufs, rows, span, (rows, d, inner, F32(_NO_MASK[0]), *_NO_MASK[1:], d),
                              defines, -(-span // 4), vec, lane_max=ROW_LANE_SOFTMAX, lane_group=group)]
    return build


def masked_softmax_dispatch(ctx, name, shape, mask_shape, scale, buffers, bool_mask=False, row_stride=None):
    """softmax(x * scale + mask) along the last dim of x (shape), mask broadcast; buffers
    (x, y, mask). bool_mask: the mask is int32 0/1 (1: attend; 0: -inf). row_stride: x's and
    y's rows that far apart (>= the row; attention pads them to a multiple of 4), else packed."""
    d, rows = shape[-1], _numel(shape[:-1])
    rs = d if row_stride is None else int(row_stride)
    st = broadcast_strides(mask_shape, shape)
    mshape, (mst,) = merge_dims(list(shape[:-1]), st[:-1]) if len(shape) > 1 else ([1], [[0]])
    if len(mshape) > 3:
        raise ValueError(f"{name}: the mask's row dims merge to {len(mshape)} (the shader takes 3)")
    # vec4 path (float_softmax.comp): rows starting on vec4s (a last part block is padding), the
    # mask's rows whole vec4s or broadcast along the row (1), else the mask read by words (2)
    vec = 0 if rs % 4 else 1 if st[-1] == 0 or (d % 4 == 0 and all(v % 4 == 0 for v in mst)) else 2
    push = (rows, d, 1, F32(scale), len(mshape), st[-1], _pad(mshape, 3, 1), _pad(mst, 3), rs)
    return _row_dispatch(ctx, "float_softmax", list(buffers), rows, d, push,
                         ("MASKED",) + (("BOOL_MASK",) if bool_mask else ()), -(-d // 4), vec)


def _softmax_masked_build(ctx, node):
    _check(ctx, node)
    x, mask = node.inputs
    y = node.outputs[0]
    return [masked_softmax_dispatch(ctx, node.name, ctx.spec(x).shape, ctx.spec(mask).shape,
                                    node.attrs.get("scale", 1.0), [ctx.buffer(x), ctx.buffer(y), ctx.buffer(mask)])]


def _batch_geometry(a_view, b_view, out_strides):
    """(M, N, K, (sam, sak, sbk, sbn, som, son), batch shape, [a, b, out batch strides], out shape)
    of np.matmul over strided views ([shape, strides] each, rank >= 2) and an output view."""
    (ash, ast), (bsh, bst) = a_view, b_view
    m, k = ash[-2:]
    kb, n = bsh[-2:]
    if k != kb:
        raise ValueError(f"matmul: inner dims differ, {tuple(ash)} @ {tuple(bsh)}")
    batch = tuple(np.broadcast_shapes(tuple(ash[:-2]), tuple(bsh[:-2])))
    sab = broadcast_strides(ash[:-2], batch, ast[:-2])
    sbb = broadcast_strides(bsh[:-2], batch, bst[:-2])
    sob = list(out_strides[:-2])
    inner = (ast[-2], ast[-1], bst[-2], bst[-1], out_strides[-2], out_strides[-1])
    return m, n, k, inner, batch, [sab, sbb, sob], batch + (m, n)


def _contiguous_view(shape):
    return [list(shape), strides_of(shape)]


def matmul_views(a_shape, b_shape):
    """numpy's matmul of contiguous a and b as views: 1-D operands become (1, K) / (K, 1)
    (the output drops that dim, which changes no offsets of a contiguous out)."""
    a2 = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b2 = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    out = batch + (a2[-2], b2[-1])
    return _contiguous_view(a2), _contiguous_view(b2), strides_of(out)


def matmul_shape(a_shape, b_shape) -> tuple:
    """The shape np.matmul gives (1-D operands lose their dim)."""
    a_view, b_view, _ = matmul_views(a_shape, b_shape)
    batch = tuple(np.broadcast_shapes(tuple(a_view[0][:-2]), tuple(b_view[0][:-2])))
    return batch + ((a_shape[-2],) if len(a_shape) > 1 else ()) + ((b_shape[-1],) if len(b_shape) > 1 else ())


def _matmul_dispatch(ctx, node, a_view, b_view, out_strides, want_numel, buffers=None, offsets=(0, 0, 0),
                     fq=None):
    """One float_matmul dispatch of strided views from base offsets (a, b, out); buffers
    (a, b, out) default to the node's; fq: a folded fake_quantize's attrs (fold_fake_quantize)."""
    m, n, k, inner, batch, (sab, sbb, sob), rshape = _batch_geometry(a_view, b_view, out_strides)
    if _numel(rshape) != want_numel:
        raise ValueError(f"{node.name}: the product has {_numel(rshape)} values, the output {want_numel}")
    if batch:
        bshape, (sab, sbb, sob) = merge_dims(batch, sab, sbb, sob)
    else:
        bshape, sab, sbb, sob = [1], [0], [0], [0]
    if len(bshape) > MAX_BATCH_RANK:
        raise ValueError(f"{node.name}: {len(bshape)} batch dims after merging (the shader takes {MAX_BATCH_RANK})")
    sam, sak, sbk, sbn, som, son = inner
    # its K loop, 4 at a time, and two walks over the batch dims (a float adaptive pool is a
    # matmul with K = H * W: 720 x 1280 went past llvmpipe's budget)
    ctx.device.info.check_loop_budget(-(-k // 4) + 2 * (len(bshape) + 1) + 4, f"float_matmul over K = {k}")
    x4 = lambda *v: all(int(q) % 4 == 0 for q in v)
    a_off, b_off, o_off = (int(v) for v in offsets)
    if buffers is None:
        buffers = [ctx.buffer(node.inputs[0]), ctx.buffer(node.inputs[1]), ctx.buffer(node.outputs[0])]
    # VEC_KN reads a by the vec4s that hold its rows' words: its last row's last vec4 must be
    # whole in a's buffer (a planned buffer is: vkq.executor); a's rows anywhere in a vec4: A_SHIFT
    a_end = a_off + sum((d - 1) * s_ for d, s_ in zip(bshape, sab)) + (m - 1) * sam + k
    a_shift = 0 if x4(sam, *sab, a_off) else 1
    if sak == 1 and sbk == 1 and x4(k, sam, sbn, *sab, *sbb, a_off, b_off):
        variant = "VEC_K"
    elif sak == 1 and sbn == 1 and x4(n, sbk, *sbb, b_off) and -(-a_end // 4) * 4 <= buffers[0].size:
        variant = "VEC_KN"
    else:
        variant = "GENERAL"
    out4 = ["OUT4"] if son == 1 and x4(n, som, *sob, o_off) else []
    tm = next((t for t in MATMUL_ROWS if t >= m), MATMUL_ROWS[-1])
    tn = MATMUL_TN
    lanes = -(-n // tn)   # column tiles; a workgroup is the smallest power of two >= them, <= LOCAL
    width = 1
    while width < min(lanes, LOCAL):
        width *= 2
    # a workgroup narrower than a subgroup takes that many batches side by side (ZB): at N = 32
    # (8 lanes) half of each of lavapipe's 16-wide SIMD rows sat idle (Swin's P V 3.6 -> 2.05 ms)
    zb = max(1, min(int(ctx.device.info.subgroup_size or 1) // width, _numel(batch)))
    groups = (-(-lanes // width), -(-m // tm), -(-_numel(batch) // zb))
    push = (m, n, k, *inner, len(bshape), _pad(bshape, MAX_BATCH_RANK, 1), _pad(sab, MAX_BATCH_RANK),
            _pad(sbb, MAX_BATCH_RANK), _pad(sob, MAX_BATCH_RANK), a_off, b_off, o_off, *fake_quant_push(fq))
    return ctx.device.dispatch("float_matmul", list(buffers), groups,
                               local=(width * zb,), spec=(a_shift if variant == "VEC_KN" else 0, zb, 1 if fq else 0),
                               push=push,
                               defines={variant: 1, **dict.fromkeys(out4, 1), "TM": tm})


def _matmul_build(ctx, node):
    _check(ctx, node)
    a, b = node.inputs
    a_view, b_view, out_strides = matmul_views(ctx.spec(a).shape, ctx.spec(b).shape)
    want = matmul_shape(ctx.spec(a).shape, ctx.spec(b).shape)
    if tuple(want) != ctx.spec(node.outputs[0]).shape:
        raise ValueError(f"{node.name}: output shape {ctx.spec(node.outputs[0]).shape}, expected {tuple(want)}")
    return [_matmul_dispatch(ctx, node, a_view, b_view, out_strides, _numel(want), fq=node.attrs.get("fq"))]


def _matmul_strided_build(ctx, node):
    _check(ctx, node)
    at = node.attrs
    out = ctx.spec(node.outputs[0]).shape
    if tuple(at["out_shape"]) != out:
        raise ValueError(f"{node.name}: out_shape {at['out_shape']} but the output is {out}")
    for t, (shape, strides) in zip(node.inputs, (at["a_view"], at["b_view"])):
        top = sum((d - 1) * s for d, s in zip(shape, strides))
        if top >= _numel(ctx.spec(t).shape) or min(strides, default=0) < 0:
            raise ValueError(f"{node.name}: the view {shape}/{strides} reaches past {t!r}")
    return [_matmul_dispatch(ctx, node, at["a_view"], at["b_view"], at["out_strides"], _numel(out), fq=at.get("fq"))]


def _reduce_build(variant):
    def build(ctx, node):
        _check(ctx, node)
        x, y = node.inputs[0], node.outputs[0]
        shape = ctx.spec(x).shape
        dims = node.attrs.get("dims")
        red = sorted({d % len(shape) for d in dims}) if dims else list(range(len(shape)))
        keep = [d for d in range(len(shape)) if d not in red]
        st = strides_of(shape)
        kshape, (kst,) = merge_dims([shape[d] for d in keep], [st[d] for d in keep])
        rshape, (rst,) = merge_dims([shape[d] for d in red], [st[d] for d in red])
        if len(kshape) > 4 or len(rshape) > 4:
            raise ValueError(f"{node.name}: reduction over more than 4 (merged) dims")
        n_out, count = _numel(ctx.spec(y).shape), _numel([shape[d] for d in red])
        push = (n_out, count, len(kshape), len(rshape), _pad(kshape, 4, 1), _pad(kst, 4),
                _pad(rshape, 4, 1), _pad(rst, 4))
        bufs = [ctx.buffer(x), ctx.buffer(y)]
        # one contiguous run a row, in whole vec4s (float_reduce.comp CONTIG)
        contig = rst == [1] and count % 4 == 0 and all(s % 4 == 0 for s in kst)
        defines = [variant] + (["CONTIG"] if contig else [])
        ranks = (len(kshape), len(rshape))       # (specialization 7, 8: the index arithmetic's dims)
        if count >= REDUCE_ROW:     # a subgroup / workgroup an output (float_reduce.comp says why)
            return [_row_dispatch(ctx, "float_reduce", bufs, n_out, count, push, defines=defines,
                                  passes=1, per_step=4, spec_from_7=ranks)]
        return [ctx.device.dispatch("float_reduce", bufs, grid_1d(n_out, LOCAL), local=(LOCAL,), push=push,
                                    spec=(LOCAL, 1, 0, 1, *ranks), defines=defines)]
    return build


def permute_dims(op, attrs, rank) -> list:
    """The dims of a permute node, or of a transpose node as a permutation."""
    if op == "transpose":
        dims = list(range(rank))
        d0, d1 = attrs["dim0"] % rank, attrs["dim1"] % rank
        dims[d0], dims[d1] = dims[d1], dims[d0]
        return dims
    return [d % rank for d in attrs["dims"]]


# ---------------------------------------------------------------- folding copies into matmuls

VIEW_OPS = ("reshape", "transpose", "permute")


def reshape_view(shape, strides, new_shape):
    """Strides that read a strided view (shape, strides) reshaped row-major to new_shape
    without copying, or None where none exist (numpy's no-copy reshape rule: the old dims
    merged into each new dim must be contiguous among themselves)."""
    shape, new_shape = [int(d) for d in shape], [int(d) for d in new_shape]
    if _numel(shape) != _numel(new_shape) or 0 in shape:
        return None
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    out, i, j = [0] * len(new_shape), 0, 0
    while i < len(new_shape):
        if new_shape[i] == 1:
            i += 1
            continue
        # take new dims i.. and old dims j.. until their sizes agree
        ni, nsize, oj, osize = i, new_shape[i], j, old[j][0]
        while nsize != osize:
            if nsize < osize:
                ni += 1
                nsize *= new_shape[ni]
            else:
                oj += 1
                osize *= old[oj][0]
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(j, oj)):
            return None
        stride = old[oj][1]
        for k in range(ni, i - 1, -1):
            out[k] = stride
            stride *= new_shape[k]
        i, j = ni + 1, oj + 1
    return out


def _through(view, node, in_shape):
    """The view after one copy node, reading forward (None: a reshape that needs a copy)."""
    shape, strides = view
    if node.op == "reshape":
        st = reshape_view(shape, strides, node.attrs["shape"])
        return None if st is None else [list(node.attrs["shape"]), st]
    dims = permute_dims(node.op, node.attrs, len(shape))
    return [[shape[d] for d in dims], [strides[d] for d in dims]]


def _back(view, node, in_shape):
    """The view of a copy node's input inside the buffer its output's view describes."""
    shape, strides = view
    if node.op == "reshape":
        st = reshape_view(shape, strides, in_shape)
        return None if st is None else [list(in_shape), st]
    dims = permute_dims(node.op, node.attrs, len(in_shape))
    back = [0] * len(dims)
    for i, d in enumerate(dims):
        back[d] = strides[i]
    return [list(in_shape), back]


def readers_of(program) -> dict:
    """tensor -> the nodes that read it, in program order."""
    readers: dict = {}
    for n in program.nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)
    return readers


def split_view(t, step, forward, start):
    """(base, view, chain): walking up from tensor t through the ops that made it (step(cur) ->
    (op, its input) or None), the farthest tensor `base` whose values t can be read from as a
    strided view (start(base), then forward(view, op) down the chain: None where a copy is
    needed). A head split read in place. With no such ops: (t, start(t), [])."""
    chain, tensors = [], [t]
    while (up := step(tensors[-1])) is not None:
        chain.append(up[0])
        tensors.append(up[1])
    for cut in range(len(chain), 0, -1):
        view = start(tensors[cut])
        for item in reversed(chain[:cut]):
            view = forward(view, item) if view is not None else None
        if view is not None:
            return tensors[cut], view, chain[:cut]
    return t, start(t), []


def merge_view(start, readers, private, is_view, shape):
    """(last, chain, view): the copies after tensor `start` (each the only reader of the one
    before it, is_view), the tensor the longest foldable run of them ends in, and [shape,
    strides] of start's values inside that tensor (read back from its contiguous layout): a
    head merge written in place. With no copies: (start, [], contiguous)."""
    chain, cur = [], start
    while private(cur) and is_view(readers[cur][0]):
        chain.append(readers[cur][0])
        cur = readers[cur][0].outputs[0]
    for cut in range(len(chain), 0, -1):
        last = chain[cut - 1].outputs[0]
        view = _contiguous_view(shape(last))
        for c in reversed(chain[:cut]):
            view = _back(view, c, shape(c.inputs[0])) if view is not None else None
        if view is not None:
            return last, chain[:cut], view
    return start, [], _contiguous_view(shape(start))


def fold_views_into_matmul(program, keep=frozenset()) -> int:
    """Replace matmul(reshape/permute copies of a, ... of b) -> reshape/permute copies by one
    matmul_strided that reads a and b and writes the last tensor in place, when every tensor in
    between has no other reader: a transformer's head split (view + transpose), K's transpose
    and the head merge (transpose + reshape) cost no dispatches. Returns the matmuls folded."""
    producer = {t: n for n in program.nodes for t in n.outputs}
    readers = readers_of(program)
    shape = lambda t: list(program.tensors[t].shape)
    private = lambda t: len(readers.get(t, [])) == 1 and t not in program.outputs
    is_view = lambda n: n is not None and n.op in VIEW_OPS and n.name not in gone and n.name not in keep
    gone, folded = set(), 0

    for idx, node in enumerate(program.nodes):
        if node.op not in ("matmul", "bmm") or any(len(shape(t)) < 2 for t in node.inputs + node.outputs):
            continue
        ins = []
        for t in node.inputs:   # up from each operand: its copies, nearest first
            step = lambda cur: (producer[cur], producer[cur].inputs[0]) \
                if private(cur) and is_view(producer.get(cur)) else None
            ins.append(split_view(t, step, lambda v, c: _through(v, c, None),
                                  lambda b: _contiguous_view(shape(b))))
        last, out_chain, view = merge_view(node.outputs[0], readers, private, is_view, shape)
        if not (ins[0][2] or ins[1][2] or out_chain):
            continue
        (a, a_view, a_chain), (b, b_view, b_chain) = ins
        attrs = {"a_view": a_view, "b_view": b_view, "out_strides": view[1], "out_shape": shape(last)}
        program.nodes[idx] = type(node)("matmul_strided", [a, b], [last], attrs, name=node.name)
        for c in a_chain + b_chain + out_chain:
            gone.add(c.name)
            for t in (c.outputs if c in a_chain + b_chain else c.inputs):
                program.tensors.pop(t, None)
        folded += 1
    program.nodes = [n for n in program.nodes if n.name not in gone]
    return folded


def _broadcasts(shape, to) -> bool:
    try:
        broadcast_strides(shape, to)
        return True
    except ValueError:
        return False


def fold_scale_mask_into_softmax(program, keep=frozenset()) -> int:
    """softmax(mul(x, scalar) + mask) along the last dim -> softmax_masked(x, mask; scale) when
    the intermediates have no other reader: attention's scale and padding mask cost no passes
    over the scores. The references agree bit for bit. Returns the softmaxes folded."""
    producer = {t: n for n in program.nodes for t in n.outputs}
    readers = readers_of(program)
    shape = lambda t: tuple(program.tensors[t].shape)
    private = lambda t: len(readers.get(t, [])) == 1 and t not in program.outputs
    gone, folded = set(), 0
    for idx, node in enumerate(program.nodes):
        t = node.inputs[0] if node.op == "softmax" else None
        add = producer.get(t) if t is not None else None
        if (add is None or not private(t) or add.op != "add" or add.name in keep or len(add.inputs) != 2
                or add.attrs.get("alpha", 1) != 1
                or node.attrs.get("dim", -1) % len(shape(t)) != len(shape(t)) - 1):
            continue
        pair = [(x, m) for x, m in (add.inputs, add.inputs[::-1]) if shape(x) == shape(t) and _broadcasts(shape(m), shape(t))]
        if not pair:
            continue
        src, mask = pair[0]
        scale, mul = 1.0, producer.get(src)
        if private(src) and mul is not None and mul.op == "mul" and mul.name not in keep and len(mul.inputs) == 1:
            scale, src = float(mul.attrs["scalar"]), mul.inputs[0]
            gone.add(mul.name)
            program.tensors.pop(mul.outputs[0], None)
        gone.add(add.name)
        program.tensors.pop(t, None)
        program.nodes[idx] = type(node)("softmax_masked", [src, mask], list(node.outputs), {"scale": scale},
                                        name=node.name)
        folded += 1
    program.nodes = [n for n in program.nodes if n.name not in gone]
    return folded


FQ_EPILOGUE = frozenset(BINARY) | {"matmul", "bmm", "matmul_strided"}   # kernels with the FQ epilogue


def fold_fake_quantize(program, keep=frozenset()) -> int:
    """fake_quantize(y) -> y's op with attr fq, where y is a float32 result of an op in
    FQ_EPILOGUE that nothing else reads: its kernel quantizes and dequantizes each value before
    storing it (fake_quant.glsl, as the fake_quantize shader does: the same bits), one dispatch
    and one pass over the values fewer. A static attention's scores (Swin: matmul -> fq -> bias
    add -> fq [-> mask add -> fq] -> softmax) keep only their matmul and adds. Runs after
    fold_scale_mask_into_softmax, which folds only adds without one. Returns the pairs folded."""
    producer = {t: (i, n) for i, n in enumerate(program.nodes) for t in n.outputs}
    readers = readers_of(program)
    gone = set()
    for node in program.nodes:
        t = node.inputs[0] if node.op == "fake_quantize" and node.name not in keep else None
        idx, src = producer.get(t, (None, None))
        if (src is None or src.op not in FQ_EPILOGUE or src.attrs.get("fq") or len(readers.get(t, [])) != 1
                or t in program.outputs or program.tensors[t].dtype != "float32"
                or program.tensors[node.outputs[0]].shape != program.tensors[t].shape):
            continue
        fq = {k: node.attrs[k] for k in ("scale", "zero_point", "qmin", "qmax") if k in node.attrs}
        program.nodes[idx] = type(src)(src.op, list(src.inputs), list(node.outputs), {**src.attrs, "fq": fq},
                                       name=src.name)
        program.tensors.pop(t, None)
        gone.add(node.name)
    program.nodes = [n for n in program.nodes if n.name not in gone]
    return len(gone)


def fold_broadcast_expands(program, keep=frozenset()) -> int:
    """expand(x) read only by float elementwise binary ops -> they read x (their kernel
    broadcasts it: a stride of 0), where the op's output shape stays the same. F.normalize's
    x / norm.expand_as(x) (Swin-V2's cosine attention: 24 of them, (64, 3, 64, 32) floats
    written and read back, 1.5 ms each on lavapipe) becomes one broadcasting division. Returns
    the expands folded."""
    readers = readers_of(program)
    T, rename = program.tensors, {}          # an expand's output -> its input, as readers will read

    def takes(r, t, src):
        if r.op not in BINARY or len(r.inputs) != 2:      # (a reader stays, reading the input instead)
            return False
        if any(T[u].dtype != "float32" for u in r.inputs + r.outputs):
            return False
        shapes = [T[src if u == t else rename.get(u, u)].shape for u in r.inputs]   # (both may be folds)
        try:
            return tuple(np.broadcast_shapes(*shapes)) == tuple(T[r.outputs[0]].shape)
        except ValueError:
            return False
    gone = set()
    for node in program.nodes:
        t = node.outputs[0]
        if node.op != "expand" or node.name in keep or t in program.outputs or T[t].dtype != "float32":
            continue
        users = readers.get(t, [])
        if users and all(takes(r, t, node.inputs[0]) for r in users):
            rename[t] = node.inputs[0]
            gone.add(node.name)
    program.nodes = [n if not set(n.inputs) & rename.keys() else
                     type(n)(n.op, [rename.get(u, u) for u in n.inputs], list(n.outputs), dict(n.attrs), name=n.name)
                     for n in program.nodes if n.name not in gone]
    for t in rename:
        T.pop(t, None)
    return len(gone)


# ---------------------------------------------------------------- registration

def _ieee(reference):
    """A float reference computes IEEE values where torch does, without numpy's warnings: log(0)
    is -inf, sqrt(-1) NaN, 1/0 inf, exp(100) inf; torch says nothing, and nor should a
    `vkq compare` of a model that takes a log of a ReLU's zeros."""
    @functools.wraps(reference)
    def quiet(*args, **kwargs):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            return reference(*args, **kwargs)
    return quiet


def _op(name, reference, build, shaders, doc, decline=None):
    reference = _ieee(reference)
    register_op(type(name, (), {"name": name, "reference": staticmethod(reference), "build": staticmethod(build),
                                "shaders": shaders, "__doc__": doc, "decline": staticmethod(decline)}))


_op("layer_norm", layer_norm, _layer_norm_build, ("float_layer_norm",),
    "Float layer norm over the trailing normalized_shape dims (one workgroup a row).")
_op("rms_norm", rms_norm, _layer_norm_build, ("float_layer_norm",),
    "Float RMS norm over the trailing normalized_shape dims: layer norm's shader, not centred, no bias.")
_op("group_norm", group_norm, _group_norm_build, ("float_layer_norm",),
    "Float group norm: C/groups channels x positions a row, per-channel weight and bias.")
_op("softmax", softmax, _softmax_build(()), ("float_softmax",), "Float softmax along dim (max-subtracted).")
_op("softmax_masked", softmax_masked, _softmax_masked_build, ("float_softmax",),
    "Float softmax(x * scale + mask) along the last dim (attention weights), mask broadcast.")
_op("log_softmax", log_softmax, _softmax_build(("LOG",)), ("float_softmax",), "Float log-softmax along dim.")
_op("gelu", gelu, _unary_build(_gelu_variant), ("float_unary",), "Float GELU (erf, or the tanh approximation).")
_op("hardtanh", hardtanh, _unary_build("OP_CLAMP", lambda a: (a.get("min_val", -1.0), a.get("max_val", 1.0))),
    ("float_unary",), "Float clamp to [min_val, max_val].")
_op("leaky_relu", leaky_relu, _unary_build("OP_LEAKY_RELU", lambda a: (a.get("negative_slope", 0.01), 0.0)),
    ("float_unary",), "Float leaky relu: x, or x * negative_slope where x <= 0.")
_op("elu", elu, _unary_build("OP_ELU", lambda a: (a.get("alpha", 1.0), 0.0)), ("float_unary",),
    "Float ELU: x, or alpha (exp(x) - 1) where x <= 0.")
_op("softplus", softplus, _unary_build("OP_SOFTPLUS", lambda a: (a.get("beta", 1.0), a.get("threshold", 20.0))),
    ("float_unary",), "Float softplus (beta, threshold as torch).")
_op("clamp", clamp, _unary_build("OP_CLAMP", lambda a: (_bound(a.get("min"), -np.inf), _bound(a.get("max"), np.inf))),
    ("float_unary",), "Float clamp to [min, max], either bound optional (clamp, clamp_min, clamp_max).")
for _name, _fn in UNARY.items():
    if _name in INT_UNARY:
        _op(_name, _int_unary(_fn, INT_UNARY[_name]), _int_unary_build(_name), ("float_unary", "word_ops"),
            f"Elementwise {_name}: float32, or int32 (word_ops).", _int_unary_decline)
        continue
    _op(_name, _fn, _unary_build(f"OP_{_name.upper()}"), ("float_unary",), f"Float elementwise {_name}.")
for _name, _fn in BINARY.items():
    _op(_name, _binary(_fn), _binary_build(f"OP_{_name.upper()}"), ("float_binary", "word_ops"),
        f"Elementwise {_name} with broadcasting (or a scalar operand): float32, or int32 (not div).",
        _binary_decline)
_op("matmul", matmul, _matmul_build, ("float_matmul",), "Float matmul (numpy broadcasting rules).")
_op("bmm", matmul, _matmul_build, ("float_matmul",), "Float batched matmul.")
_op("grouped_matmul", grouped_matmul, _grouped_matmul_build, ("grouped_matmul",),
    "A mixture of experts' grouped matmul: x's rows sorted by expert, each times its expert's weight.",
    _grouped_matmul_decline)
_op("matmul_strided", matmul_strided, _matmul_strided_build, ("float_matmul",),
    "Float matmul of strided views of its inputs, written through a strided view of its output.")
_op("pow", pow_, _unary_build(_pow_variant, lambda a: (a["exponent"], 0.0)), ("float_unary",),
    "Float x ** exponent for a scalar exponent (2 and 3 by products, as ATen; others pow_f32).")
_op("polygamma", polygamma, _unary_build("OP_POLYGAMMA", lambda a: (a["n"], 0.0)), ("float_unary",),
    "Float polygamma(n, x), the n-th derivative of digamma, n >= 1 (n! zeta(n + 1, x) summed in float32).",
    _polygamma_decline)
_op("mean", mean, _reduce_build("MEAN"), ("float_reduce",), "Float mean over dims.")
_op("sum", sum_, _reduce_build("SUM"), ("float_reduce",), "Float sum over dims.")
_op("vector_norm", vector_norm, _reduce_build("NORM2"), ("float_reduce",), "Float 2-norm over dims.")
_op("amax", amax, _reduce_build("AMAX"), ("float_reduce",), "Float max over dims (NaN if any).")
_op("amin", amin, _reduce_build("AMIN"), ("float_reduce",), "Float min over dims (NaN if any).")
