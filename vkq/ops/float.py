"""Float32 ops on Vulkan: what a lowered model computes in float between (and around) its
int8 or dynamic-int8 kernels. Each op has its numpy reference (the specification) and a build()
that runs it as a float32 compute shader, so a float region stays on the device. This module
holds the elementwise ops, the reductions and what every float kernel shares (strides, the
elementwise and row dispatches); the others:
  vkq.ops.float_norm       layer_norm, group_norm, rms_norm, layer_norm_q8, softmax(_masked), log_softmax
  vkq.ops.float_matmul     matmul, bmm, matmul_strided, grouped_matmul
  vkq.ops.float_rewrites   the program rewrites for attention (fold_views_into_matmul, ...)
  vkq.ops.float_math       the numpy twins of the shaders' float math (float_math.glsl, float_exact.glsl)

  gelu(x; approximate), hardtanh(x; min_val, max_val), clamp(x; min, max),
  sigmoid, tanh, relu, silu, exp, neg, abs, sqrt, rsqrt, hardswish, hardsigmoid, mish, log, log1p,
  log2, erf, floor, ceil, round, trunc, sign, sin, cos, tan, atan, asin, acos, sinh, cosh, asinh,
  acosh, atanh, expm1, exp2, log10, erfc, lgamma, digamma, erfinv, i0, i0e, i1, i1e, ndtri,
  erfcx(x), pow(x; exponent), polygamma(x; n),
  leaky_relu(x; negative_slope), elu(x; alpha),
  softplus(x; beta, threshold)                                                     float_unary
  add, sub, mul, div, maximum, minimum(a[, b]; scalar, scalar_first, alpha)
                                                              float_binary (numpy broadcasting)
  sum, mean(x; dims, keepdim), vector_norm(x; dims, keepdim)   float_reduce (SUM / MEAN / NORM2)
  amax, amin(x; dims, keepdim)                           float_reduce (AMAX / AMIN): exact, NaN if any

The ops that only move values (reshape, permute, cat, slice, ...) are in vkq.ops.shape, for
every dtype; their float32/int32 dispatches use float_copy (a strided copy of words).
Inputs and outputs are float32, contiguous row-major (the executor's device layout).

How close the device comes to the reference (tests/test_float_ops.py checks each on odd
shapes on every test device; tests/test_exact_float.py the exact ones on every path):
  Bit for bit on every device, the reference a float32 twin of the kernel's steps
  (shaders/include/float_exact.glsl's rules; vkq/ops/float_math.py holds the twins):
  add, sub, mul, maximum, minimum, relu, neg, abs, clamp, hardtanh, leaky_relu, floor, ceil,
  round, trunc, sign, the copies     one rounding each
  div                                div_f32: no division instruction (Vulkan's is 2.5 ulp),
                                     + - * and integer steps: IEEE's correctly rounded
                                     quotient wherever it is normal, inf, zero or NaN; a
                                     quotient below 2^-126 a zero of its sign (flushed)
  exp, sigmoid, tanh, silu, erf      exp_f32 (Cody-Waite + Cephes), recip_newton for every
                                     division, precise, products flushed: exp <= 3 ulp, sigmoid
                                     4, silu 3 of float64, tanh and erf <= 2.5e-7 / 4.5e-7
                                     absolute (tests/test_exact_float.py)
  log, log1p, log2, log10            log_f32 (Cephes logf; x split by its bits, subnormals too),
                                     log1p adds what 1 + x dropped (c / u by recip_newton): max
                                     error vs float64 on 4M-value sweeps: log 0.82 ulp, log1p
                                     0.89, log2 1.83 (exact at powers of two), log10 1.98
  expm1, exp2                        Kahan's (u - 1) x / log u, the division by recip_newton:
                                     3.3 ulp; 2^n exp_f32((x - n) ln 2): 0.98 ulp (exact at
                                     integers; below 2^-126 flushed)
  pow (not 2 or 3)                   ftz(exp_f32(e log_f32|x|)): <= 1.83 (1 + |e ln|x||) ulp
                                     measured; C's rules for signs, zeros, inf, NaN
  softplus, mish, elu                log1p_f32(exp_f32(beta x)) * fl(1 / beta): 1.7 ulp (of the
                                     float64 formula on beta x rounded, as torch's); mish x
                                     tanh_f32(softplus): 6.9e-7 absolute + 2 ulp; elu alpha
                                     (exp_f32(x) - 1): 1.1e-7 absolute (steps flushed)
  sqrt, rsqrt                        sqrt correctly rounded (rsqrt_newton, Dekker's residual, one
                                     correction: np.sqrt's bits; torch's CPU sqrt differs by 1
                                     ulp on 0.6 %); rsqrt rsqrt_newton: 1.21 ulp
  hardswish, hardsigmoid             x * min(max(x + 3, 0), 6) / 6 as ATen, the division by 6
                                     correctly rounded (div6_f32): torch's bits; 1.91 / 1.0 ulp
                                     of float64 (torch's two roundings)
  layer_norm, group_norm, rms_norm   float_layer_norm: the canonical row sum (64 partials, a
                                     fixed tree, ftz), rsqrt_newton; a few ulp of float64's
  softmax(_masked), log_softmax      float_softmax: the canonical sum of exp_f32, recip_newton /
                                     log_f32; (4 + |x - m|) ulp of float64's
  sum, mean, vector_norm             float_reduce: each output's K values in their logical order
                                     (row-major over the reduced dims) by the canonical sum of
                                     ftz(x) / ftz(x^2) (value j into partial j % 64, the fixed
                                     tree, ftz), mean ftz(S * float32(1/K)), the norm sqrt_f32
                                     (correctly rounded, as sqrt's): |error| <=
                                     (ceil(K/64) + 6) eps/2 sum |x| (+ 2^-126 an add flushed), mean
                                     + 1.5 ulp, norm half that relative + 0.5 ulp; squares below
                                     2^-126 count 0 (tests/test_exact_float.py); measured: 1.2 eps
                                     of the sum of 2^20 values >= 0, the norm 1.3 eps relative
  matmul(_strided), bmm,             float_matmul: groups of 4 products from k = 0, summed in k
  scaled_dot_product_attention       order (matmul_f32): |error| <= 2 K eps sum |a b| of exact
                                     (a product that is subnormal, in a sum below ~2^-102, may
                                     differ on a device that flushes subnormals)
  Within a bound only (Vulkan's own precision or a lane-dependent order, not yet issue 59's rules):
  gelu (both forms)         erf_f32 / tanh_f32 (now exact) in float32 vs float64: <= 0.5 |x| 5e-7 +
                            4 ulp (its bit-exact form took SwiftShader's compiler minutes)
  sin, cos                  sincos_f32 (Cephes): ~1e-7 absolute for |x| < 8192
  tan, atan, asin, acos,    Cephes' tanf / atanf / asinf / acosf, glibc's float asinh / acosh /
  sinh, cosh, asinh, acosh, atanh forms on log_f32 / log1p_f32, sinh / cosh on exp_f32: a few
  atanh                     ulp (tests/test_float_ops.py states each bound)
  erfc                      Numerical Recipes' erfcc, -x^2 split exactly: 6 ulp measured
  lgamma, digamma, erfinv   float_math.glsl, measured: 4 ulp (x > 0; x < 0 3 ulp + 1e-6 absolute),
                            5 ulp + 1e-6 absolute (near its zeros), 3 ulp
  grouped_matmul            float32 dots in the kernel's order vs numpy's
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..device import grid_1d
from ..quant import fake_quant_push, fake_quantize
from ..registry import register_op
from .float_math import (NORM_PARTS, div6_f32, div_f32, elu_f32, erf_f32, exp2_f32, exp_f32, expm1_f32, ftz,
                         log10_f32, log1p_f32, log2_f32, log_f32, mish_f32, pow_f32, rsqrt_f32, sigmoid_f32,
                         silu_f32, softplus_f32, sqrt_f32, sum_canonical, sum_squares_canonical, tanh_f32)
from .special import bessel_i64, digamma64, erf64, erfc64, erfcx64, erfinv64, lgamma64, ndtri64, polygamma64
from ..vkinfo import DeviceLimit

F32 = np.float32
LOCAL = 64        # workgroup width of the elementwise and row shaders (<= every device's limit)
PER = 4           # values per invocation in the elementwise shaders
MAX_RANK = 6      # dims of an elementwise iteration after merging (push-constant arrays)
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
REDUCE_ROW = 64        # float_reduce: from this many values an output, its lanes share them


def _f(x):
    return np.asarray(x, dtype=F32)


# ---------------------------------------------------------------- references

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
    "sigmoid": sigmoid_f32,  # bit-exact (float_math.glsl twins from here to erf)
    "tanh": tanh_f32,
    "relu": lambda x: np.maximum(_f(x), F32(0)),
    "silu": silu_f32,       # bit-exact (silu(-inf) = -0 where torch's is NaN)
    "exp": lambda x: ftz(exp_f32(x)),
    "neg": lambda x: -_f(x),
    "abs": lambda x: np.abs(_f(x)),
    "sqrt": sqrt_f32,       # bit-exact, correctly rounded (np.sqrt's bits)
    "rsqrt": rsqrt_f32,     # bit-exact: rsqrt_newton
    # x * min(max(x + 3, 0), 6) / 6 as ATen, the division correctly rounded (float_math.glsl div6_f32)
    "hardswish": lambda x: div6_f32(ftz(_f(x) * np.clip(_f(x) + F32(3), F32(0), F32(6)))),
    "hardsigmoid": lambda x: np.clip(_f(x) + F32(3), F32(0), F32(6)) / F32(6),
    "mish": mish_f32,       # bit-exact (float_math.glsl twins: mish .. log2, expm1, exp2, log10)
    "log": log_f32,
    "log1p": log1p_f32,
    "log2": log2_f32,
    "expm1": expm1_f32,
    "exp2": exp2_f32,
    "log10": log10_f32,
    "erf": erf_f32,
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
        ("erfc", erfc64),
        ("lgamma", lgamma64), ("digamma", digamma64), ("erfinv", erfinv64), ("ndtri", ndtri64),
        ("erfcx", erfcx64))},
    **{name: (lambda order, scaled: lambda x: _f64(lambda v: bessel_i64(v, order, scaled), x))(order, scaled)
       for name, order, scaled in (("i0", 0, False), ("i0e", 0, True), ("i1", 1, False), ("i1e", 1, True))},
}


def _f64(fn, x):
    """fn of x in float64, rounded to float32 (out of its domain NaN, overflow inf: no warnings)."""
    with np.errstate(all="ignore"):
        return fn(_f(x).astype(np.float64)).astype(F32)


def _inverse(v) -> F32:
    """1 / v rounded to float32 (of v as float32): what float_unary takes for a division by v."""
    with np.errstate(divide="ignore"):
        return F32(1 / np.float64(F32(v)))


def softplus(x, *, beta=1.0, threshold=20.0):
    """torch's softplus: x where beta x > threshold, else log(1 + exp(beta x)) / beta; bit-exact
    (float_math.softplus_f32: the division a product by 1 / beta rounded)."""
    return softplus_f32(x, beta, threshold, _inverse(beta))


def leaky_relu(x, *, negative_slope=0.01):
    x = _f(x)
    return np.where(x > 0, x, x * F32(negative_slope))


def elu(x, *, alpha=1.0):
    """x where x > 0, else alpha (exp(x) - 1), bit-exact (float_math.elu_f32)."""
    return elu_f32(x, alpha)


def _integral(v) -> bool:
    return v is None or float(v) == int(v)


def pow_(x, *, exponent):
    """x ** exponent for a scalar exponent; 2 and 3 as ATen computes them ((x * x) * x), others
    bit-exact (float_math.pow_f32)."""
    x = _f(x)
    if exponent == 2:
        return x * x
    if exponent == 3:
        return (x * x) * x
    return pow_f32(x, exponent)


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
        if fn is not div_f32 and np.asarray(a).dtype.kind in "iub" and _integral(alpha) and (
                np.asarray(b).dtype.kind in "iub" if b is not None else _integral(scalar)):
            a64 = np.asarray(a, np.int64)       # int32 tensors (ids, masks): integer arithmetic, wrapping
            other = np.int64(scalar) if b is None else np.asarray(b, np.int64)
            other = other * int(alpha)
            r = fn(other, a64) if (b is None and scalar_first) else fn(a64, other)
            return r.astype(np.int32)
        a = _f(a)
        other = F32(scalar) if b is None else _f(b)
        if alpha != 1:      # (div: flushed, as float_binary.comp's, which skips a product by 1)
            other = ftz(ftz(other) * F32(alpha)) if fn is div_f32 else other * F32(alpha)
        return _fq(fn(other, a) if (b is None and scalar_first) else fn(a, other), fq)
    return reference


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": div_f32,   # (float_math.glsl's twin)
          "maximum": np.maximum, "minimum": np.minimum}    # (NaN-propagating, as torch's)


def _axes(dims):
    return None if dims is None else tuple(dims)


def _reduced_rows(x, dims, keepdim):
    """x's values as (outputs, count) rows, each output's reduced values in their logical order
    (row-major over the reduced dims: float_reduce.comp's j), and the output's shape."""
    x = _f(x)
    red = sorted({d % x.ndim for d in dims}) if dims else list(range(x.ndim))
    keep = [d for d in range(x.ndim) if d not in red]
    rows = np.transpose(x, keep + red).reshape(math.prod(x.shape[d] for d in keep), -1)
    shape = [1 if d in red else x.shape[d] for d in range(x.ndim)] if keepdim else [x.shape[d] for d in keep]
    return rows, tuple(shape)


def sum_(x, *, dims=None, keepdim=False):
    """float_reduce.comp SUM: the canonical sum (float_math.sum_canonical) of ftz(x) over dims
    (all where dims is None or empty, as torch's sum(x, []))."""
    rows, shape = _reduced_rows(x, dims, keepdim)
    return sum_canonical(ftz(rows)).reshape(shape)


def mean(x, *, dims=None, keepdim=False):
    """float_reduce.comp MEAN: ftz(sum_ * float32(1 / count))."""
    rows, shape = _reduced_rows(x, dims, keepdim)
    inv = F32(1.0 / rows.shape[1]) if rows.shape[1] else F32(np.nan)
    return ftz(sum_canonical(ftz(rows)) * inv).reshape(shape)


def amax(x, *, dims=None, keepdim=False):
    return np.max(_f(x), axis=_axes(dims), keepdims=keepdim)      # (a NaN propagates, as torch's)


def amin(x, *, dims=None, keepdim=False):
    return np.min(_f(x), axis=_axes(dims), keepdims=keepdim)


def vector_norm(x, *, dims=None, keepdim=False):
    """The 2-norm over dims (linalg_vector_norm with ord 2; other ords are decomposed into sums,
    vkq/passes/decompose_ops.py), float_reduce.comp NORM2: sqrt_f32 of the canonical sum of
    ftz(x^2) (float_math.sum_squares_canonical)."""
    rows, shape = _reduced_rows(x, dims, keepdim)
    return sqrt_f32(sum_squares_canonical(rows)).reshape(shape)


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
                  parts: int = 0, by_rounds: bool = False, tail: bool = False):
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
    parts: a shader that sums its rows in a canonical order over this many partials (the norms:
    16 vec4s), at most that many lanes of a row holding them: a workgroup a row is no wider, the
    loop count is reckoned over those lanes, a subgroup a row needs shuffles (its tree),
    specialization constants 7, 8 get (the lanes that hold partials, the partials each holds;
    spec_from_7's first two are placeholders for them) and a lane keeps whole rounds of its
    partials (KEEP a multiple of the second). by_rounds: the shader's loops go a round of `parts`
    vec4s an iteration whatever its lanes (float_reduce: PART_T of them unrolled a lane), so a
    lane's loop count is reckoned over `parts` lanes. tail (float_softmax, with parts and vec4s):
    specialization constant 9 says whether a row has vec4s past its lanes' KEEP visits (a round
    of `parts` vec4s a PART_T of KEEP), so that the shader's loops past KEEP compile to nothing
    where it has none; a program is built at each concrete shape, so the row length is known."""
    info = ctx.device.info
    sg, step = int(info.subgroup_size), 4 if vec else per_step
    limit = info.loop_budget or math.inf
    widest = min(info.max_workgroup_invocations, info.max_workgroup_size[0])

    def owner(width, per_group, owners=rows, values=d):   # (width, rows a workgroup, workgroups, a lane's loop iterations)
        groups = min(max(1, -(-owners // per_group)), info.max_workgroup_count[0])
        lanes = width // per_group
        lanes = min(lanes, parts) if parts else lanes
        rows_each = -(-owners // (groups * per_group))
        sharing = parts if by_rounds else lanes
        # each pass over its share and the exit test of each; a workgroup's row: its two
        # reductions over the lanes (float_workgroup.glsl: log2(lanes) + 1 iterations each)
        trees = 2 * lanes.bit_length() if per_group == 1 and lanes > 1 else 0
        return width, per_group, groups, rows_each * (passes * (-(-values // (sharing * step)) + 1) + trees + 1) + 1

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
    if parts:       # a lane visits PART_T vec4s a round of `parts`; it keeps whole rounds
        held = min(lanes, parts)
        spec_from_7 = (held, parts // held) + tuple(spec_from_7)[2:]
        if vec4s is not None:
            rounds = max(1, min(kept // spec_from_7[1], -(-vec4s // parts)))
            keep = (rounds * spec_from_7[1], int(vec))
            if tail:
                spec_from_7 = spec_from_7[:2] + (int(vec4s > parts * rounds),)
    keep += () if center is None else (int(center),)
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
        lo, hi, *aux = bounds(node.attrs)      # (aux: SOFTPLUS's 1 / beta)
        return [_elementwise(ctx, "float_unary", [ctx.buffer(x), ctx.buffer(y)], -(-n // 4),   # vec4 blocks
                             (n, F32(lo), F32(hi), F32(aux[0] if aux else 0.0)), [v])]
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
                _pad(rshape, 4, 1), _pad(rst, 4), F32(1.0 / count) if count else F32(np.nan))
        bufs = [ctx.buffer(x), ctx.buffer(y)]
        # one contiguous run a row, in whole vec4s (float_reduce.comp CONTIG)
        contig = rst == [1] and count % 4 == 0 and all(s % 4 == 0 for s in kst)
        defines = [variant] + (["CONTIG"] if contig else [])
        # (specialization 7, 8: the canonical sum's PART_LANES, PART_T; 9, 10: the index arithmetic's dims)
        ranks = (1, NORM_PARTS // 4, len(kshape), len(rshape))
        canon = variant in ("SUM", "MEAN", "NORM2")
        if count >= REDUCE_ROW:     # a subgroup / workgroup an output (float_reduce.comp says why)
            return [_row_dispatch(ctx, "float_reduce", bufs, n_out, count, push, defines=defines,
                                  passes=1, per_step=4, spec_from_7=ranks, parts=NORM_PARTS // 4 if canon else 0,
                                  by_rounds=canon)]
        # (11: an invocation's vec4s, float_reduce.comp lane_canon)
        return [ctx.device.dispatch("float_reduce", bufs, grid_1d(n_out, LOCAL), local=(LOCAL,), push=push,
                                    spec=(LOCAL, 1, 0, 1, *ranks, max(1, -(-count // 4))), defines=defines)]
    return build


def permute_dims(op, attrs, rank) -> list:
    """The dims of a permute node, or of a transpose node as a permutation."""
    if op == "transpose":
        dims = list(range(rank))
        d0, d1 = attrs["dim0"] % rank, attrs["dim1"] % rank
        dims[d0], dims[d1] = dims[d1], dims[d0]
        return dims
    return [d % rank for d in attrs["dims"]]


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


_op("gelu", gelu, _unary_build(_gelu_variant), ("float_unary",), "Float GELU (erf, or the tanh approximation).")
_op("hardtanh", hardtanh, _unary_build("OP_CLAMP", lambda a: (a.get("min_val", -1.0), a.get("max_val", 1.0))),
    ("float_unary",), "Float clamp to [min_val, max_val].")
_op("leaky_relu", leaky_relu, _unary_build("OP_LEAKY_RELU", lambda a: (a.get("negative_slope", 0.01), 0.0)),
    ("float_unary",), "Float leaky relu: x, or x * negative_slope where x <= 0.")
_op("elu", elu, _unary_build("OP_ELU", lambda a: (a.get("alpha", 1.0), 0.0)), ("float_unary",),
    "Float ELU: x, or alpha (exp(x) - 1) where x <= 0.")
_op("softplus", softplus, _unary_build("OP_SOFTPLUS", lambda a: (a.get("beta", 1.0), a.get("threshold", 20.0),
                                                                   _inverse(a.get("beta", 1.0)))),
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
