"""The float32 Vulkan ops (vkq/ops/float.py, float_norm.py, float_matmul.py) against their numpy references, on odd shapes,
on every test device. Tolerances say why they are not zero:
  exact   one correctly rounded float op per value (add/sub/mul, clamps) or a copy of bits
  ulp(n)  within n ulp of the reference (division: Vulkan allows 2.5 ulp)
  fn      exp_f32/erf_f32/tanh_f32 approximations (shaders/include/float_math.glsl) and float32 tree
          sums vs the reference's float64: an absolute + relative bound
  dot     a float32 sum of K products in another order than the reference's:
          |error| <= 2 K eps sum_k |a b|  (the usual bound for recursive summation)
"""
import copy
import math
import warnings

import numpy as np
import pytest

from oputil import single_op_program, spec
from vkq.executor import VulkanExecutor, run_reference
from vkq.ops import float as fops, float_math, float_norm, float_rewrites
from vkq.quant import dequantize, fake_quantize, quantize
from vkq.registry import get_op

EPS = float(np.finfo(np.float32).eps)
R = np.random.default_rng(7)


def rnd(*shape, lo=-3.0, hi=3.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def run_op(device, op, inputs, attrs, out_shape, constants=None, steps=None):
    """(vulkan, reference) of one op; inputs: list of arrays (activations), constants: list of
    arrays passed after them. steps: a list that receives the op's dispatches."""
    names = [f"x{i}" for i in range(len(inputs))]
    consts = {f"c{i}": (spec(a.shape), a) for i, a in enumerate(constants or [])}
    prog = single_op_program(op, [(n, spec(a.shape)) for n, a in zip(names, inputs)],
                             [("y", spec(out_shape))], attrs, consts)
    ex = VulkanExecutor(prog, device)
    got = ex(*inputs)
    if steps is not None:
        steps.extend(st for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps)
    ref = run_reference(prog, *inputs)
    assert got.shape == ref.shape == tuple(out_shape) and got.dtype == np.float32
    return got, ref


def check(got, ref, tol, scale=None):
    if tol == "exact":
        np.testing.assert_array_equal(got, ref)
        return
    kind, *p = tol
    if kind == "ulp":
        bound = p[0] * np.spacing(np.abs(ref)) + 1e-37
    elif kind == "bound":
        bound = p[0]
    elif kind == "fn":
        atol, rtol = p
        bound = atol + rtol * np.abs(ref)
    else:   # "dot": scale = sum_k |a b| per output, p[0] = K
        bound = 2 * p[0] * EPS * scale + 1e-30
    err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    assert np.all(err <= bound), f"max error {err.max():.3g} at {np.unravel_index(np.argmax(err - bound), err.shape)}, bound there {bound.reshape(-1)[np.argmax(err - bound)] if np.ndim(bound) else bound:.3g}"


# ---------------------------------------------------------------- elementwise

UNARY_CASES = [
    ("gelu", {"approximate": "none"}, rnd(5, 1537, lo=-9, hi=9), "gelu"),
    ("gelu", {"approximate": "tanh"}, rnd(3, 401, lo=-9, hi=9), "gelu"),
    ("relu", {}, rnd(7, 37), "exact"),
    ("neg", {}, rnd(7, 37), "exact"),
    ("abs", {}, rnd(7, 37), "exact"),
    ("hardtanh", {"min_val": -0.5, "max_val": 0.75}, rnd(7, 37), "exact"),
    ("clamp", {"min": 1e-9, "max": None}, rnd(11, 3, lo=-1, hi=1), "exact"),
    ("clamp", {"min": None, "max": 0.25}, rnd(11, 3, lo=-1, hi=1), "exact"),
    ("exp", {}, rnd(9, 113, lo=-80, hi=80), "exact"),     # bit-exact twins: exp .. erf
    ("sigmoid", {}, rnd(9, 113, lo=-30, hi=30), "exact"),
    ("silu", {}, rnd(9, 113, lo=-30, hi=30), "exact"),   # (bit-exact: silu_f32)
    ("hardswish", {}, rnd(9, 113, lo=-5, hi=5), "exact"),
    ("hardsigmoid", {}, rnd(9, 113, lo=-5, hi=5), "exact"),
    ("tanh", {}, rnd(9, 113, lo=-10, hi=10), "exact"),
    ("sqrt", {}, rnd(9, 113, lo=1e-3, hi=1e3), "exact"),
    ("rsqrt", {}, rnd(9, 113, lo=1e-3, hi=1e3), "exact"),
    ("pow", {"exponent": 2.0}, rnd(9, 113, lo=-9, hi=9), "exact"),
    ("pow", {"exponent": 3.0}, rnd(9, 113, lo=-9, hi=9), "exact"),
    ("leaky_relu", {"negative_slope": 0.1}, rnd(7, 37), "exact"),
    ("elu", {"alpha": 1.3}, rnd(9, 113, lo=-20, hi=5), "exact"),
    ("softplus", {"beta": 1.0, "threshold": 20.0}, rnd(9, 113, lo=-40, hi=40), "exact"),
    ("softplus", {"beta": 2.0, "threshold": 5.0}, rnd(9, 113, lo=-9, hi=9), "exact"),
    ("mish", {}, rnd(9, 113, lo=-30, hi=30), "exact"),     # (bit-exact: mish_f32)
    ("log", {}, np.exp(rnd(9, 113, lo=-80, hi=80)), "exact"),
    ("log", {}, 1 + rnd(3, 37, lo=-1e-3, hi=1e-3), "exact"),           # near 1, where log ~ x - 1
    ("log1p", {}, rnd(9, 113, lo=-0.999, hi=60), "exact"),
    ("log1p", {}, rnd(3, 37, lo=-1e-5, hi=1e-5), "exact"),           # log1p(x) ~ x: 1 + x drops x's bits
    ("log2", {}, np.exp(rnd(9, 113, lo=-80, hi=80)), "exact"),
    ("log2", {}, 2.0 ** np.arange(-126.0, 128.0, dtype=np.float32), "exact"),   # floor(log2 x) a bit length
    # (not subnormal x: SwiftShader flushes them to 0, as Vulkan allows without shaderDenormPreserve)
    ("pow", {"exponent": 0.75}, rnd(9, 113, lo=1e-3, hi=1e3), "exact"),     # local response norm
    ("pow", {"exponent": -1.5}, rnd(9, 113, lo=1e-2, hi=1e2), "exact"),
    ("pow", {"exponent": 4.0}, rnd(9, 113, lo=-9, hi=9), "exact"),          # x < 0: even, odd integer powers
    ("pow", {"exponent": -5.0}, rnd(9, 113, lo=-9, hi=9), "exact"),
    ("pow", {"exponent": 2.5}, rnd(9, 113, lo=1e-10, hi=1e10), "exact"),
    ("erf", {}, rnd(9, 113, lo=-5, hi=5), "exact"),
    ("floor", {}, rnd(7, 37, lo=-5, hi=5), "exact"),
    ("ceil", {}, rnd(7, 37, lo=-5, hi=5), "exact"),
    ("round", {}, np.round(rnd(7, 37, lo=-5, hi=5) * 4) / 4, "exact"),  # halves: to even
    ("trunc", {}, rnd(7, 37, lo=-5, hi=5), "exact"),
    ("sign", {}, np.round(rnd(7, 37, lo=-2, hi=2)), "exact"),             # zeros among them
    ("sign", {}, np.float32([[np.nan, np.inf, -np.inf, 0, -0.0, 3, -2, 1e-30, -1e-30]] * 3), "exact"),   # sign(NaN) = 0, torch's
    ("sin", {}, rnd(9, 113, lo=-10, hi=10), ("fn", 2e-7, 4 * EPS)),
    ("cos", {}, rnd(9, 113, lo=-10, hi=10), ("fn", 2e-7, 4 * EPS)),
    ("sin", {}, rnd(3, 41, lo=-4000, hi=4000), ("fn", 4e-7, 4 * EPS)),   # rotary: positions x frequencies
    ("cos", {}, rnd(3, 41, lo=-4000, hi=4000), ("fn", 4e-7, 4 * EPS)),
    # past 8192 the Payne-Hanek reduction (float_math.glsl: reduce_octant_large): 2 ulp measured
    # on 120000 values from 1 to 1.6e38 (the float32 products' reduction gave sin(1e30) = -inf)
    ("sin", {}, np.exp(rnd(5, 29, lo=9, hi=88)) * np.sign(rnd(5, 29)), ("fn", 4e-7, 4 * EPS)),
    ("cos", {}, np.exp(rnd(5, 29, lo=9, hi=88)) * np.sign(rnd(5, 29)), ("fn", 4e-7, 4 * EPS)),
    ("tan", {}, np.exp(rnd(5, 29, lo=9, hi=88)) * np.sign(rnd(5, 29)), ("ulp", 4)),
    # Cephes / glibc float forms (float_math.glsl): <= 3 ulp measured on 20000 values each, both drivers
    ("atan", {}, rnd(9, 113, lo=-50, hi=50), ("ulp", 4)),
    ("atan", {}, np.exp(rnd(3, 37, lo=-80, hi=80)), ("ulp", 4)),
    ("asin", {}, rnd(9, 113, lo=-1, hi=1), ("ulp", 4)),
    ("acos", {}, rnd(9, 113, lo=-1, hi=1), ("ulp", 4)),
    ("acos", {}, rnd(3, 37, lo=-1, hi=-0.99), ("ulp", 4)),               # pi - 2 asin(.)
    ("tan", {}, rnd(9, 113, lo=-20, hi=20), ("ulp", 4)),
    ("sinh", {}, rnd(9, 113, lo=-80, hi=80), ("ulp", 5)),
    ("sinh", {}, rnd(3, 37, lo=-1e-3, hi=1e-3), ("ulp", 5)),             # from expm1: no cancellation
    ("cosh", {}, rnd(9, 113, lo=-89, hi=89), ("ulp", 5)),                # finite past e^x's overflow at 88.7
    ("asinh", {}, rnd(9, 113, lo=-1e5, hi=1e5), ("ulp", 4)),
    ("asinh", {}, rnd(3, 37, lo=-3, hi=3), ("ulp", 4)),
    ("acosh", {}, 1 + np.exp(rnd(9, 113, lo=-10, hi=12)), ("ulp", 4)),
    ("atanh", {}, rnd(9, 113, lo=-0.999, hi=0.999), ("ulp", 4)),
    ("expm1", {}, rnd(9, 113, lo=-80, hi=80), "exact"),
    ("expm1", {}, rnd(3, 37, lo=-1e-3, hi=1e-3), "exact"),            # exp(x) - 1 alone cancels here
    ("exp2", {}, rnd(9, 113, lo=-126, hi=127), "exact"),
    ("exp2", {}, np.round(rnd(3, 37, lo=-126, hi=127)), "exact"),        # powers of two exactly
    ("log10", {}, np.exp(rnd(9, 113, lo=-80, hi=80)), "exact"),
    ("erfc", {}, rnd(9, 113, lo=-5, hi=9), ("ulp", 8)),                  # measured 6 (Numerical Recipes' 1e-7)
    ("erfc", {}, rnd(3, 37, lo=-1e-3, hi=1e-3), ("ulp", 8)),
    # lgamma, digamma, erfinv (float_math.glsl): measured on 20000 values a range, both drivers:
    # lgamma 4 ulp (x < 0: 3 ulp + 1e-6), digamma 5 ulp + 1e-6, erfinv 3 ulp
    ("lgamma", {}, rnd(9, 113, lo=1e-3, hi=30), ("ulp", 6)),
    ("lgamma", {}, np.exp(rnd(3, 37, lo=-60, hi=80)), ("ulp", 6)),       # Stirling's range up to 5e34
    ("lgamma", {}, np.concatenate([1 + rnd(3, 19, lo=-1e-3, hi=1e-3), 2 + rnd(3, 19, lo=-1e-3, hi=1e-3)]), ("ulp", 8)),   # its zeros
    ("lgamma", {}, rnd(9, 113, lo=-12, hi=0), ("fn", 1e-6, 8 * EPS)),     # the reflection
    ("digamma", {}, rnd(9, 113, lo=1e-3, hi=30), ("fn", 1e-6, 8 * EPS)),
    ("digamma", {}, np.exp(rnd(3, 37, lo=-60, hi=80)), ("fn", 1e-6, 8 * EPS)),
    ("digamma", {}, rnd(9, 113, lo=-12, hi=0), ("fn", 1e-6, 8 * EPS)),
    ("erfinv", {}, rnd(9, 113, lo=-1, hi=1), ("ulp", 4)),
    ("erfinv", {}, (1 - np.exp(rnd(3, 37, lo=-16, hi=-1))) * np.sign(rnd(3, 37)), ("ulp", 4)),   # the tails
    ("erfinv", {}, rnd(3, 37, lo=-1e-4, hi=1e-4), ("ulp", 4)),
    # Bessel I0 / I1 (scaled or not), ndtri, erfcx (float_math.glsl; measured on 20000 values, both
    # drivers: i0, i1 6 ulp, i0e, i1e 3, ndtri 5, erfcx 6)
    ("i0", {}, rnd(9, 113, lo=-8, hi=8), ("ulp", 7)),                   # the power series
    ("i0", {}, rnd(9, 113, lo=-91, hi=91), ("ulp", 7)),                 # finite past 88.7, as I0 is
    ("i0e", {}, rnd(9, 113, lo=-91, hi=91), ("ulp", 4)),
    ("i0e", {}, np.exp(rnd(3, 37, lo=4, hi=80)), ("ulp", 4)),            # up to 5e34
    ("i1", {}, rnd(9, 113, lo=-91, hi=91), ("ulp", 7)),
    ("i1", {}, rnd(3, 37, lo=-1e-3, hi=1e-3), ("ulp", 7)),               # ~ x / 2
    ("i1e", {}, rnd(9, 113, lo=-91, hi=91), ("ulp", 4)),
    ("i1e", {}, rnd(3, 37, lo=7.5, hi=8.5), ("ulp", 4)),                 # where the two forms meet
    ("ndtri", {}, rnd(9, 113, lo=0, hi=1), ("ulp", 6)),
    ("ndtri", {}, np.exp(rnd(3, 37, lo=-85, hi=-2)), ("ulp", 6)),        # the lower tail to 1e-37
    ("ndtri", {}, 1 - np.exp(rnd(3, 37, lo=-16, hi=-2)), ("ulp", 6)),    # the upper, 1 - p exact
    ("erfcx", {}, rnd(9, 113, lo=-9.3, hi=12), ("ulp", 7)),
    ("erfcx", {}, np.exp(rnd(3, 37, lo=2, hi=80)), ("ulp", 7)),          # ~ 1 / (x sqrt(pi)), no overflow
]


@pytest.mark.parametrize("op,attrs,x,tol", UNARY_CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(UNARY_CASES)])
def test_unary(loads_device, op, attrs, x, tol):
    """Blocks of 4 values by vec4 loads and stores, the last block value by value (the odd
    sizes); with texel loads on whole vec4s only, so that x can be a texel buffer."""
    device, steps = loads_device, []
    if device.texel_loads:
        x = x.reshape(-1)[: x.size // 4 * 4]
    got, ref = run_op(device, op, [x], attrs, x.shape, steps=steps)
    assert ("TEXEL" in steps[0].defines) == device.texel_loads
    if tol == "gelu":   # 0.5 x (1 + erf(x / sqrt 2)): erf's 4e-7 (tanh's 2e-7) scaled by 0.5 |x|, plus rounding
        check(got, ref, ("bound", 0.5 * np.abs(x) * 5e-7 + 4 * EPS * np.abs(ref) + 1e-12))
    else:
        check(got, ref, tol)


A = rnd(3, 5, 37)
BINARY_CASES = [
    ("add", [A, rnd(3, 5, 37)], {}, "exact"),
    ("add", [rnd(3, 1, 37), rnd(5, 37)], {"alpha": 2}, "exact"),                 # both broadcast
    ("sub", [A, rnd(37)], {}, "exact"),
    ("sub", [A], {"scalar": 3.0, "scalar_first": True}, "exact"),
    ("mul", [rnd(1, 13, 384), (R.random((1, 13, 1)) > 0.4).astype(np.float32)], {}, "exact"),   # masking
    ("mul", [A], {"scalar": 0.1767767}, "exact"),
    ("div", [rnd(2, 3, 1, 5, 7, 3), rnd(3, 4, 1, 7, 1, lo=0.5, hi=2)], {}, "exact"),   # rank 6 (div_f32: exact)
    ("div", [A], {"scalar": 7.0}, "exact"),
    ("div", [A], {"scalar": 2.0, "scalar_first": True}, "exact"),
    ("maximum", [A, np.where(R.random((3, 1, 37)) > 0.8, np.nan, rnd(3, 1, 37)).astype(np.float32)], {}, "exact"),
    ("minimum", [rnd(2, 1, 9), np.float32([[np.nan], [0.5], [-np.inf]])], {}, "exact"),     # NaN wins
    ("maximum", [A], {"scalar": 0.25}, "exact"),
]


@pytest.mark.parametrize("op,inputs,attrs,tol", BINARY_CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(BINARY_CASES)])
def test_binary(device, op, inputs, attrs, tol):
    out_shape = np.broadcast_shapes(*[a.shape for a in inputs])
    got, ref = run_op(device, op, inputs, attrs, out_shape)
    check(got, ref, tol)


@pytest.mark.parametrize("op,tol", [("add", "exact"), ("sub", "exact"), ("mul", "exact"), ("div", "exact"),
                                    ("maximum", "exact"), ("minimum", "exact")])
@pytest.mark.parametrize("form", ["tensor", "scalar", "scalar_first"])
def test_binary_contiguous(loads_device, op, tol, form):
    """CONTIG (contiguous operands): blocks of 4 values by vec4 loads and stores, and the last,
    partial block value by value (n = 4k + 3); with texel loads (n = 4k, whole texels) a and b
    are texel fetches."""
    device, steps = loads_device, []
    n = 4 * 37 if device.texel_loads else 4 * 37 + 3
    a, b = rnd(n), rnd(n, lo=0.5, hi=2)
    inputs, attrs = ([a, b], {"alpha": 2} if op in ("add", "sub") else {}) if form == "tensor" else \
        ([a], {"scalar": 1.7, "scalar_first": form == "scalar_first"})
    got, ref = run_op(device, op, inputs, attrs, (n,), steps=steps)
    check(got, ref, tol)
    (st,) = steps
    assert "CONTIG" in st.defines and ("TEXEL" in st.defines) == device.texel_loads, st.defines


@pytest.mark.parametrize("op,tol", [("add", "exact"), ("sub", "exact"), ("mul", "exact"), ("div", "exact"),
                                    ("maximum", "exact"), ("minimum", "exact")])
@pytest.mark.parametrize("a_shape,b_shape,path", [((5, 3, 7, 9), (1, 3, 7, 9), "FLAT"),   # attention's bias / mask
                                                  ((4, 3, 4, 9), (1, 3, 4, 9), "FLAT"),   # (whole texels)
                                                  ((2, 3, 5, 11), (2, 3, 5, 1), "FLAT"),  # one value a row
                                                  ((4, 3, 5, 11), (4, 3, 5, 1), "FLAT"),
                                                  ((2, 3, 5, 3), (1, 1, 1, 3), "ROWS"),   # rows of 3
                                                  ((3, 1, 7), (5, 7), "ROWS"),            # both broadcast
                                                  ((4, 3, 1), (4, 3, 6), None)])          # a's rows: one value
def test_binary_rows(loads_device, op, tol, a_shape, b_shape, path):
    """ROWS (the last dim contiguous in a, in b contiguous or one value a row): blocks of 4 values
    of a row, the last block of each odd row partial; FLAT (a has the output's shape, rows of >= 4):
    blocks of 4 across rows, the last partial, a and b as texels where the device takes texel
    loads and both are whole texels (here program inputs, sized exactly; intermediates and constants
    always are); otherwise (a one value a row) value by value."""
    steps = []
    got, ref = run_op(loads_device, op, [rnd(*a_shape), rnd(*b_shape, lo=0.5, hi=2)],
                      {"alpha": 2} if op == "add" else {}, np.broadcast_shapes(a_shape, b_shape), steps=steps)
    check(got, ref, tol)
    d = steps[0].defines
    assert ("ROWS" in d) == (path == "ROWS") and ("FLAT" in d) == (path == "FLAT") and "CONTIG" not in d, d
    whole = np.prod(a_shape) % 4 == 0 and np.prod(b_shape) % 4 == 0
    assert ("TEXEL" in d) == (path == "FLAT" and loads_device.texel_loads and whole), d


def test_binary_with_a_constant_operand(device):
    """An operand that is a program constant (a position-embedding table) goes up once."""
    x, table = rnd(1, 11, 29), rnd(1, 11, 29)
    got, ref = run_op(device, "add", [x], {}, x.shape, constants=[table])
    check(got, ref, "exact")


@pytest.mark.parametrize("a_shape,b_shape", [((6, 3, 7, 9), (3, 7, 9)),          # attention's bias: 189 values
                                             ((2, 4, 3, 5, 7), (1, 4, 1, 5, 7))])  # a shifted window's mask
def test_binary_flat_with_a_constant_operand(loads_device, a_shape, b_shape):
    """FLAT with b a constant of a size that is not whole texels (Swin's relative-position bias,
    (3, 49, 49)): constants go up as whole ivec4s (BuildContext.const_buffer), so b too is read
    as texels where the device takes them; rows end inside blocks, the values across are b's
    next row."""
    steps = []
    x, table = rnd(*a_shape), rnd(*b_shape)
    got, ref = run_op(loads_device, "add", [x], {}, a_shape, constants=[table], steps=steps)
    check(got, ref, "exact")
    d = steps[0].defines
    assert "FLAT" in d and ("TEXEL" in d) == (loads_device.texel_loads and x.size % 4 == 0), d


def test_div_exact(device):
    """common.glsl's div_exact (FLAT's row and broadcast index: no integer division) against
    numpy's floor division: quotients next to an integer on either side, n up to 2^30 - 1, d from
    1 to past n."""
    from vkq.device import grid_1d
    rng = np.random.default_rng(3)
    d = np.concatenate([[1, 2, 3, 4, 7, 49, 2401, 7203, 65535, 65536, (1 << 20) + 1, (1 << 29) + 3, (1 << 30) - 1],
                        rng.integers(1, 1 << 12, 40), rng.integers(1, 1 << 30, 40)]).astype(np.int64)
    q = np.concatenate([rng.integers(0, (1 << 30) // d), ((1 << 30) - 1) // d])    # and the largest n's
    d = np.concatenate([d, d])
    n = np.stack([q * d + off for off in (-1, 0, 1, 2)], 1)           # around each multiple of d
    n = np.concatenate([n.reshape(-1), rng.integers(0, 1 << 30, 4000), [0, (1 << 30) - 1]])
    dd = np.concatenate([np.repeat(d, 4), rng.integers(1, 1 << 16, 4000), [5, 1]])
    keep = (n >= 0) & (n < (1 << 30))
    n, dd = n[keep].astype(np.int32), dd[keep].astype(np.int32)
    bufs = [device.buffer(n), device.buffer(dd), device.buffer(size=n.size)]
    step = device.dispatch("selftest_div", bufs, grid_1d(n.size, 64), local=(64,), push=(n.size,))
    device.run([step], upload=bufs[:2], download=bufs[2:])
    np.testing.assert_array_equal(bufs[2].read(), n // dd)


def test_float_references_give_torchs_special_values_without_warnings():
    """log(0) = -inf, log / sqrt of a negative NaN, 1/0 inf, exp(100) inf: the references give
    torch's values and, like torch, no numpy RuntimeWarning (a `vkq compare` of a model taking
    the log of a ReLU's zeros printed them)."""
    torch = pytest.importorskip("torch")
    x = np.array([0.0, -1.0, 2.0, 100.0, -np.inf, np.nan], np.float32)
    t = torch.from_numpy(x)
    want = {"log": torch.log(t), "sqrt": torch.sqrt(t), "rsqrt": torch.rsqrt(t), "exp": torch.exp(t)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for op, w in want.items():
            np.testing.assert_allclose(get_op(op).reference(x), w.numpy(), rtol=1e-6, err_msg=op)
        np.testing.assert_array_equal(get_op("div").reference(x, np.zeros_like(x)), (t / 0).numpy())


# ---------------------------------------------------------------- rows: layer norm, softmax

@pytest.fixture(params=["subgroup", "workgroup"])
def rows(request, monkeypatch):
    """Row shaders both ways: a subgroup a row (the default where subgroup arithmetic exists)
    and a workgroup a row (shared-memory reductions). Returns which."""
    monkeypatch.setattr(fops, "ROW_LANE", False)
    monkeypatch.setattr(fops, "ROW_SUBGROUP", request.param == "subgroup")
    return request.param


@pytest.fixture(params=["lane", "subgroup", "workgroup"])
def lane_rows(request, monkeypatch):
    """The same for the shaders that also have a lane a row (ROW_LANE: the default on CPU
    drivers where rows are short): softmax, layer norm, group norm."""
    monkeypatch.setattr(fops, "ROW_LANE", request.param == "lane")
    monkeypatch.setattr(fops, "ROW_SUBGROUP", request.param != "workgroup")
    return request.param


def row_owner(steps, device, rows, span, lane_max):
    """Assert that a row shader's one dispatch took the owner `rows` asks for, and return it:
    a lane a row only on CPU drivers and up to lane_max values (span: the row's values, VEC 3's
    3 words before it included)."""
    (st,) = steps
    want = "ROW_LANE" if rows == "lane" and device.info.type == "cpu" and span <= lane_max else None
    got = next(d for d in st.defines if d.startswith("ROW_"))
    if want:
        assert got == want, st.defines
    else:
        assert got != "ROW_LANE", st.defines
    return got


# vec4 path where D % 4 == 0: (13, 384) past the vec4s a lane keeps at 8 lanes a row, (2, 2056)
# at 64 lanes too
@pytest.mark.parametrize("shape,norm", [((3, 5, 37), [37]), ((13, 384), [384]), ((2, 5, 7, 3), [7, 3]), ((4, 1), [1]),
                                        ((2, 2056), [2056]), ((3, 2, 4), [2, 4])])
def test_layer_norm(loads_device, lane_rows, shape, norm):
    device, steps = loads_device, []
    x = rnd(*shape) * 4 + 1.5
    w, b = rnd(*norm), rnd(*norm)
    got, ref = run_op(device, "layer_norm", [x], {"normalized_shape": norm, "eps": 1e-5}, shape, constants=[w, b],
                      steps=steps)
    np.testing.assert_array_equal(got, ref)       # (bit-exact: tests/test_exact_float.py)
    (st,) = steps
    d = int(np.prod(norm))
    row_owner(steps, device, lane_rows, d, float_norm.ROW_LANE_NORM)
    assert st.spec[2] == (d % 4 == 0)             # VEC (spec: LOCAL, KEEP, VEC)
    # (x as texels where it is whole texels: the weight and bias, constants, always are)
    assert ("TEXEL" in st.defines) == (device.texel_loads and x.size % 4 == 0), st.defines


def test_rsqrt_newton_is_within_an_ulp():
    """layer_norm_q8's 1 / sqrt (float32 steps alone, the same bits on every device) over
    float32's normal range: within 1.25 ulp of the float64 value (all but 0.2% within 1)."""
    rng = np.random.default_rng(5)
    t = np.concatenate([np.exp2(rng.uniform(-125, 127, 200_000)), [1.0, 2.0, 4.0, 1e-5, 0.25]]).astype(np.float32)
    got = float_math.rsqrt_newton(t).astype(np.float64)
    want = 1.0 / np.sqrt(t.astype(np.float64))
    ulps = np.abs(got - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 1.25 and np.mean(ulps > 1) < 0.002, (ulps.max(), np.mean(ulps > 1))


@pytest.mark.parametrize("shape", [(2, 3, 5, 64), (7, 20), (1, 9, 768), (3, 4)])
def test_layer_norm_q8(loads_device, lane_rows, shape):
    """layer_norm_q8: an int8 4H4W tensor normalised over its last dim into an int8 one, read
    and written as int8 words. Equal to the reference bit for bit (integer row statistics,
    correctly rounded float32 steps), on rows a lane, a subgroup or a workgroup each; the
    reference within one step of the float64 layer norm, equal to it on all but a few values;
    the rows padding H to a multiple of 4 are written 0 over what the output buffer held (4
    bytes of 0x7f each)."""
    from vkq import packing
    from vkq.program import TensorSpec
    device, d = loads_device, shape[-1]
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    x[..., : d // 2] //= 4                        # rows of unequal spread
    w, b = rnd(d) + 0.5, rnd(d) * 0.2
    attrs = dict(normalized_shape=[d], eps=1e-5, x_scale=0.05, x_zp=3, out_scale=0.02, out_zp=-5, qmin=-128, qmax=127)
    prog = single_op_program("layer_norm_q8", [("x", TensorSpec(shape, "int8", "4H4W"))],
                             [("y", TensorSpec(shape, "int8", "4H4W"))], attrs,
                             {"w": (spec((d,)), w), "b": (spec((d,)), b)})
    ex = VulkanExecutor(prog, device)
    out = ex.buffers["y"]
    out.write(np.full(out.read().size, 0x7F7F7F7F, np.int32))
    ex.device.run([], upload=[out])               # (write fills the host copy; this puts it on the device)
    got, ref = ex(x), run_reference(prog, x)
    want = quantize(float_norm.layer_norm(dequantize(x, 0.05, 3), w, b, normalized_shape=[d], eps=1e-5),
                         0.02, -5)
    diff = np.abs(ref.astype(int) - want.astype(int))
    assert diff.max() <= 1 and diff.mean() < 0.002, (diff.max(), diff.mean())
    np.testing.assert_array_equal(got, ref)
    assert len(np.unique(ref)) > 50 and (ref == 127).any() or d < 32         # (saturates: out_scale 0.02)
    np.testing.assert_array_equal(out.read(), packing.pack(got, "4H4W"))      # padding bytes 0
    steps = [st for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps]
    row_owner(steps, device, lane_rows, d, float_norm.ROW_LANE_NORM)
    assert "Q8" in steps[0].defines and ("TEXEL" in steps[0].defines) == device.texel_loads, steps[0].defines


@pytest.mark.parametrize("shape,norm", [((3, 5, 37), [37]), ((13, 384), [384]), ((2, 5, 7, 3), [7, 3])])
def test_rms_norm(loads_device, lane_rows, shape, norm):
    """rms_norm is layer_norm's shader with the centring compiled out: an offset input (whose
    mean a centred norm would remove) gives torch's values, at eps large enough to matter; the
    reference's bits exactly (its canonical order: tests/test_exact_float.py)."""
    import torch
    device, steps = loads_device, []
    x, w = rnd(*shape) * 0.3 + 0.7, rnd(*norm)
    got, ref = run_op(device, "rms_norm", [x], {"normalized_shape": norm, "eps": 0.05}, shape, constants=[w],
                      steps=steps)
    check(got, ref, "exact")
    want = torch.nn.functional.rms_norm(torch.from_numpy(x), norm, torch.from_numpy(w), 0.05).numpy()
    check(got, want, ("fn", 1e-5, 1e-5))
    assert np.abs(want - float_norm.layer_norm(x, w, np.zeros_like(w), normalized_shape=norm, eps=0.05)).max() > 0.1
    (st,) = steps
    assert st.spec[2:4] == (int(np.prod(norm)) % 4 == 0, 0)     # VEC, CENTER off


def softmax_path(steps, device):
    """(VEC, texel loads?) of a float_softmax dispatch (specialization: LOCAL, KEEP, VEC)."""
    (st,) = steps
    assert st.name == "float_softmax" and ("TEXEL" in st.defines) <= device.texel_loads
    return st.spec[2], "TEXEL" in st.defines


# vec4 path where rows are contiguous and D % 4 == 0 (VEC 1): (3, 5, 128) all in registers;
# (2, 300) and (2, 2052) also past the KEEP vec4s a lane keeps (at 8 and at 64 lanes a row).
# Rows of other lengths through the tensor's own vec4s where it is whole vec4s (VEC 3): rows of
# 49 (Swin's windows; each row at another offset in its first vec4), 113 (two vec4s a lane at 16
# lanes), 50, 3 (a row inside one or two vec4s) and 2053 (past KEEP: re-read and read back)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,dim", [((3, 7, 113), -1), ((3, 7, 11), 1), ((2, 300), 1), ((5,), 0),
                                       ((3, 5, 128), -1), ((2, 2052), -1), ((3, 8, 5), 1),
                                       ((2, 6, 49), -1), ((8, 3, 113), -1), ((2, 50), -1), ((4, 3), -1),
                                       ((4, 2053), -1)])
def test_softmax(loads_device, lane_rows, op, shape, dim):
    device, steps = loads_device, []
    x = rnd(*shape, lo=-12, hi=12)
    got, ref = run_op(device, op, [x], {"dim": dim}, shape, steps=steps)
    np.testing.assert_array_equal(got, ref)     # (bit-exact: tests/test_exact_float.py)
    if op == "softmax":
        np.testing.assert_allclose(got.sum(axis=dim), 1.0, atol=2e-6)
    last = dim % len(shape) == len(shape) - 1
    vec = 0 if not last else 1 if shape[-1] % 4 == 0 else 3 if x.size % 4 == 0 else 0
    assert softmax_path(steps, device)[0] == vec
    row_owner(steps, device, lane_rows, shape[dim] + 3 * (vec == 3), float_norm.ROW_LANE_SOFTMAX)
    # TAIL (specialization constant 9): the loops past KEEP kept only where a row's vec4s pass
    # its lanes' KEEP visits (KEEP / PART_T rounds of 16): rows of 49 none, rows of 2052 always
    keep, part_t, tail = steps[0].spec[1], steps[0].spec[5], steps[0].spec[6]
    assert tail == (-(-shape[dim] // 4) > 16 * (keep // part_t))
    if shape[dim] <= 64:
        assert tail == 0
    if shape[dim] > 2048:
        assert tail == 1


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(7, 49), (2, 3, 5, 51), (9, 3, 7), (6, 5)])
def test_softmax_row_groups(loads_device, lane_rows, op, shape):
    """Packed rows of an odd length (VEC 3) between two planned intermediates (whole vec4s, so
    the row count need not make the tensor whole vec4s): under ROW_LANE a lane owns 4 rows and
    stores their vec4s whole (float_softmax.comp row_group), the last rows (fewer than 4: 7 and
    9 rows) one by one; rows of 5 and 7 put a vec4 across two rows at every offset."""
    from vkq.program import Node, Program
    device = loads_device
    x = rnd(*shape, lo=-12, hi=12)
    tensors = {"x": spec(shape), "t": spec(shape), "u": spec(shape), "y": spec(shape)}
    prog = Program(tensors, [Node("neg", ["x"], ["t"], {}), Node(op, ["t"], ["u"], {"dim": -1}),
                             Node("neg", ["u"], ["y"], {})], ["x"], ["y"], {})
    prog.validate()
    ex = VulkanExecutor(prog, device)
    got = ex(x)
    ref = run_reference(prog, x)
    np.testing.assert_array_equal(got, ref)     # (bit-exact: tests/test_exact_float.py)
    (seg,) = [seg for seg in ex.segments if seg[0] == "vulkan"]
    st = seg[1].steps[1]
    assert st.name == "float_softmax" and st.spec[2] == 3, (st.name, st.spec)     # VEC 3
    row_owner([st], device, lane_rows, shape[-1] + 3, float_norm.ROW_LANE_SOFTMAX)


@pytest.mark.parametrize("length", [9, 13, 16])
def test_softmax_masked_is_the_same_at_any_padding(loads_device, rows, length):
    """A row of `length` scores gives the same bits when padded with masked keys to 24 (the
    vec4 path) or 27 (value by value): the padding adds exactly 0 in the same places, so a
    batch run at its own length matches the same sentences padded (tests/test_transformer)."""
    device = loads_device
    x = rnd(2, 3, 5, 27, lo=-20, hi=20)
    lowest = np.finfo(np.float32).min
    outs = {}
    for d in (length, 24, 27):
        mask = np.where(np.arange(d) < length, 0, lowest).astype(np.float32).reshape(1, 1, 1, d)
        outs[d], ref = run_op(device, "softmax_masked", [np.ascontiguousarray(x[..., :d]), mask], {"scale": 0.125},
                              (2, 3, 5, d))
        np.testing.assert_array_equal(outs[d], ref)
    for d in (24, 27):
        np.testing.assert_array_equal(outs[d][..., :length], outs[length])
        assert np.all(outs[d][..., length:] == 0)


def test_softmax_of_masked_scores(device):
    """Scores plus an additive mask of float32's lowest value (what transformers builds for
    padding) come out exactly 0, so padded tokens contribute nothing."""
    x = rnd(2, 12, 17, 17, lo=-5, hi=5)
    keep = np.ones(17, bool)
    keep[11:] = False
    x = (x + np.where(keep, 0, np.finfo(np.float32).min).astype(np.float32)).astype(np.float32)
    got, ref = run_op(device, "softmax", [x], {"dim": -1}, x.shape)
    assert np.all(got[..., ~keep] == 0)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("x_shape,mask_shape", [((1, 12, 17, 17), (1, 1, 17, 17)), ((2, 3, 5, 11), (2, 1, 1, 11)),
                                                 ((3, 7), (7,)), ((2, 3, 5, 11), (5, 1)),
                                                 # the vec4 path: mask rows of whole vec4s, broadcast along
                                                 # the row, and rows past what a lane keeps in registers
                                                 ((1, 12, 16, 16), (1, 1, 16, 16)), ((2, 3, 5, 12), (5, 1)),
                                                 ((2, 2, 3, 2052), (2, 1, 1, 2052))])
def test_softmax_masked(loads_device, rows, x_shape, mask_shape):
    """softmax(x * scale + mask), the mask broadcast (a padding mask of float32's lowest value
    where mask_shape allows): exactly what mul, add and softmax give, bit for bit."""
    device, steps = loads_device, []
    x = rnd(*x_shape, lo=-40, hi=40)
    mask = np.where(R.random(mask_shape) < 0.3, np.finfo(np.float32).min, 0).astype(np.float32)
    mask.reshape(-1)[0] = 0.0
    got, ref = run_op(device, "softmax_masked", [x, mask], {"scale": 0.17677669}, x_shape, steps=steps)
    assert bool(softmax_path(steps, device)[0]) == (x_shape[-1] % 4 == 0)
    want = get_op("softmax").reference(get_op("add").reference(get_op("mul").reference(x, scalar=0.17677669), mask), dim=-1)
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, ref)
    full = np.broadcast_to(mask, x_shape) != 0
    masked = full & ~full.all(axis=-1, keepdims=True)   # a wholly masked row stays uniform, as in torch
    assert np.all(got[masked] == 0)


# ---------------------------------------------------------------- matmul

MATMUL_CASES = [
    ((3, 7, 37), (3, 37, 11), {}),
    ((2, 1, 5, 9), (3, 9, 6), {}),            # batch dims broadcast both ways
    ((13, 29), (29, 17), {}),
    ((9,), (3, 9, 6), {}),                    # 1-D operands (numpy rules)
    ((3, 5, 9), (9,), {}),
    ((1, 12, 17, 32), (1, 12, 32, 17), {}),   # attention scores, odd token count
    ((1, 12, 17, 17), (1, 12, 17, 32), {}),   # attention-weighted values
    ((2, 5, 8), (2, 8, 12), {}),               # vec4 along n (VEC_N)
]


@pytest.mark.parametrize("op", ["matmul", "bmm"])
@pytest.mark.parametrize("a_shape,b_shape,attrs", MATMUL_CASES, ids=[str(i) for i in range(len(MATMUL_CASES))])
def test_matmul(loads_device, op, a_shape, b_shape, attrs):
    device = loads_device
    if op == "bmm" and (len(a_shape) != 3 or len(b_shape) != 3):
        pytest.skip("bmm is 3-D only")
    a, b = rnd(*a_shape), rnd(*b_shape)
    ref = get_op(op).reference(a, b, **attrs)
    got, ref2 = run_op(device, op, [a, b], attrs, ref.shape)
    np.testing.assert_array_equal(ref, ref2)
    scale = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    np.testing.assert_array_equal(got, ref)     # (float_matmul.comp's order: matmul_f32)


def test_matmul_is_the_same_with_zero_padding_along_k(loads_device):
    """P V over 9 keys (GENERAL) and the same keys padded with zero weights to 12 (VEC_KN) give
    the same bits: GENERAL sums k in the groups of 4 VEC_KN does."""
    device, used = loads_device, []
    p, v = rnd(2, 7, 12, lo=0, hi=1), rnd(2, 12, 8)
    p[..., 9:] = 0
    small, _ = run_op(device, "matmul", [np.ascontiguousarray(p[..., :9]), np.ascontiguousarray(v[:, :9])], {},
                      (2, 7, 8), steps=used)
    padded, _ = run_op(device, "matmul", [p, v], {}, (2, 7, 8), steps=used)
    assert "GENERAL" in used[0].defines and "VEC_KN" in used[1].defines, [st.defines for st in used]
    np.testing.assert_array_equal(small, padded)


@pytest.mark.parametrize("l", [3, 5, 17, 49, 50])
def test_matmul_rows_off_vec4s_take_the_vec4_path(loads_device, l):
    """P V with P's rows of l values (Swin's windows: 49), packed, so that a row starts anywhere
    in a vec4: read by the vec4s that hold it (VEC_KN, A_SHIFT 1) wherever P's buffer is whole
    vec4s (here: one word more, a view), and the same bits as GENERAL, which reads P value by
    value (the same P in a buffer that ends inside a vec4)."""
    device, used = loads_device, []
    h, d = 3, 8
    p, v = rnd(2, h, l, l, lo=0, hi=1), rnd(2, h, l, d)
    rows = [[2, h, l, l], [h * l * l, l * l, l, 1]]
    attrs = {"a_view": rows, "b_view": [[2, h, l, d], [h * l * d, l * d, d, 1]],
             "out_strides": [l * h * d, d, h * d, 1], "out_shape": [2, l, h * d]}    # heads merged
    flat = np.concatenate([p.reshape(-1), np.float32([np.nan] * (-p.size % 4 or 4))])   # whole vec4s
    got, ref = run_op(device, "matmul_strided", [flat, v], attrs, (2, l, h * d), steps=used)
    want = (p @ v).transpose(0, 2, 1, 3).reshape(2, l, h * d)
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, ref)     # (float_matmul.comp's order: matmul_f32)
    assert "VEC_KN" in used[0].defines and tuple(used[0].spec)[0] == int(l % 4 != 0), (used[0].defines, used[0].spec)
    if p.size % 4:
        general, _ = run_op(device, "matmul_strided", [p.reshape(-1), v], attrs, (2, l, h * d), steps=used)
        assert "GENERAL" in used[1].defines, used[1].defines
        np.testing.assert_array_equal(got, general)


@pytest.mark.parametrize("batch", [9, 1])
def test_matmul_narrow_n_takes_batches_side_by_side(loads_device, batch):
    """N = 8 needs 2 lanes: a workgroup takes as many batches as fill a subgroup (ZB), the last
    workgroup's lanes past the last batch do nothing (9 batches: 1, 3 or 7 of them idle)."""
    device, used = loads_device, []
    a, b = rnd(batch, 6, 7), rnd(batch, 7, 8)
    got, ref = run_op(device, "matmul", [a, b], {}, (batch, 6, 8), steps=used)
    np.testing.assert_allclose(ref, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, ref)     # (float_matmul.comp's order: matmul_f32)
    assert tuple(used[0].spec)[1] == max(1, min(device.info.subgroup_size // 2, batch)), used[0].spec


def heads(x, h):
    """(B, L, h*d) -> (B, h, L, d), as a transformer splits heads."""
    b, l, hd = x.shape
    return x.reshape(b, l, h, hd // h).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("l,d", [(17, 32), (16, 32), (5, 3)])
def test_matmul_strided_attention(loads_device, l, d):
    """Q K^T and P V of head-split projections read in place, the head merge written in place:
    d = 32 takes the vec4 paths (VEC_K for Q K^T; VEC_KN for P V where l is a multiple of 4
    too), d = 3 the general one; the vec4 paths read their operands as texels where the device
    takes texel loads."""
    device, used = loads_device, []
    h = 3
    q, k, v = rnd(1, l, h * d), rnd(1, l, h * d), rnd(1, l, h * d)
    hs = [1, h, l, d]
    split = [l * h * d, d, h * d, 1]                    # heads(x) as strides over x
    k_t = [l * h * d, d, 1, h * d]                      # heads(k) transposed (..., d, l)
    scores_attrs = {"a_view": [hs, split], "b_view": [[1, h, d, l], k_t], "out_strides": [h * l * l, l * l, l, 1],
                    "out_shape": [1, h, l, l]}
    got, ref = run_op(device, "matmul_strided", [q, k], scores_attrs, (1, h, l, l), steps=used)
    want = heads(q, h) @ heads(k, h).transpose(0, 1, 3, 2)
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, ref)     # (float_matmul.comp's order: matmul_f32)
    p = rnd(1, h, l, l, lo=0, hi=1)
    ctx_attrs = {"a_view": [[1, h, l, l], [h * l * l, l * l, l, 1]], "b_view": [hs, split],
                 "out_strides": split, "out_shape": [1, l, h * d]}     # merged back to (1, l, h*d)
    got, ref = run_op(device, "matmul_strided", [p, v], ctx_attrs, (1, l, h * d), steps=used)
    want = (p @ heads(v, h)).transpose(0, 2, 1, 3).reshape(1, l, h * d)
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, ref)     # (float_matmul.comp's order: matmul_f32)
    scores, context = (st.defines for st in used)
    assert ("VEC_K" in scores) == (d % 4 == 0) and ("VEC_KN" in context) == (d % 4 == 0 and l % 4 == 0), used
    for v in (scores, context):   # the vec4 paths read a and b as texels where the device takes texel loads
        assert ("TEXEL" in v) == (device.texel_loads and ("VEC_K" in v or "VEC_KN" in v)), used


def test_matmul_strided_transposed_output(loads_device):
    """Operands read along k and n by whole vec4s (VEC_KN), the result written transposed: its
    rows are not vec4-aligned in memory, so the kernel stores scalars (no OUT4)."""
    device = loads_device
    a, b = rnd(1, 5, 12), rnd(1, 12, 8)
    attrs = {"a_view": [[1, 5, 12], [60, 12, 1]], "b_view": [[1, 12, 8], [96, 8, 1]], "out_strides": [40, 1, 5],
             "out_shape": [1, 8, 5]}
    got, ref = run_op(device, "matmul_strided", [a, b], attrs, (1, 8, 5))
    np.testing.assert_allclose(ref, (a @ b).transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, ref)     # (float_matmul.comp's order: matmul_f32)


# ---------------------------------------------------------------- reductions

REDUCE_CASES = [
    ("sum", (3, 13, 37), {"dims": [1], "keepdim": False}),
    ("sum", (3, 13, 37), {"dims": [-1, 0], "keepdim": True}),
    ("sum", (7, 11), {"dims": None, "keepdim": False}),
    ("mean", (3, 13, 37), {"dims": [0, 2], "keepdim": False}),
    ("vector_norm", (5, 384), {"dims": [1], "keepdim": True}),
    ("vector_norm", (2, 3, 5, 7, 11), {"dims": [1, 3], "keepdim": False}),
]


@pytest.mark.parametrize("op,shape,attrs", REDUCE_CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(REDUCE_CASES)])
def test_reduce(device, op, shape, attrs):
    x = rnd(*shape)
    ref = get_op(op).reference(x, **attrs)
    got, _ = run_op(device, op, [x], attrs, ref.shape)
    check(got, ref, "exact")          # (the canonical order: tests/test_exact_float.py)


@pytest.mark.parametrize("op", ["sum", "mean", "vector_norm", "amax", "amin"])
@pytest.mark.parametrize("owner", ["lane", "subgroup", "workgroup"])
def test_contiguous_reductions_read_vec4s(loads_device, monkeypatch, op, owner):
    """Reductions over one contiguous run of a multiple of 4 values (the last dims: a norm over
    features, a global pool) take float_reduce's CONTIG path, 4 values a load (TEXEL where the
    device reads texels), short rows a lane each, long ones a subgroup or a workgroup; rows whose
    values are not such a run take the value-by-value path. The reference's bits (the canonical
    order, tests/test_exact_float.py), within (ceil(count / 64) + 6) eps/2 sum |x| of float64's."""
    monkeypatch.setattr(fops, "ROW_SUBGROUP", owner == "subgroup")
    cases = [((3, 5, 7, 32), [-1], True, True), ((2, 3, 17, 24), [2, 3], False, True),
             ((2, 3, 17, 24), [1, 2, 3], False, True), ((3, 5, 30), [-1], True, False),
             ((3, 6, 4, 12), [2], False, False), ((5, 3, 6), [-1], False, False), ((2, 70, 3), [1], False, False)]
    if owner == "lane":      # (a lane an output below REDUCE_ROW values)
        cases = [c for c in cases if math.prod(c[0][d] for d in c[1]) < fops.REDUCE_ROW]
    else:
        cases = [c for c in cases if math.prod(c[0][d] for d in c[1]) >= fops.REDUCE_ROW]
    assert len(cases) >= 2
    for shape, dims, keepdim, contig in cases:
        x = rnd(*shape, lo=-4, hi=4)
        x.reshape(-1)[-3] = 7.5          # (an extreme in the last vec4)
        x64 = x.astype(np.float64)
        axis = tuple(dims)
        want = {"sum": lambda: x64.sum(axis, keepdims=keepdim), "mean": lambda: x64.mean(axis, keepdims=keepdim),
                "vector_norm": lambda: np.sqrt((x64 ** 2).sum(axis, keepdims=keepdim)),
                "amax": lambda: x.max(axis, keepdims=keepdim), "amin": lambda: x.min(axis, keepdims=keepdim)}[op]()
        steps = []
        got, _ = run_op(loads_device, op, [x], {"dims": dims, "keepdim": keepdim}, want.shape, steps=steps)
        (st,) = steps
        assert ("CONTIG" in st.defines) == contig, (shape, dims, st.defines)
        assert ("TEXEL" in st.defines) == (contig and loads_device.texel_loads), st.defines
        assert (owner == "lane") == (not {"ROW_SUBGROUP", "ROW_WORKGROUP"} & set(st.defines)), st.defines
        if op in ("amax", "amin"):
            np.testing.assert_array_equal(got, want)
            x.reshape(-1)[5] = np.nan                    # NaN where a reduced value is (torch's amax)
            got, _ = run_op(loads_device, op, [x], {"dims": dims, "keepdim": keepdim}, want.shape)
            np.testing.assert_array_equal(got, getattr(np, op)(x, axis, keepdims=keepdim))
            assert np.isnan(got).sum() == 1
            continue
        np.testing.assert_array_equal(got, get_op(op).reference(x, dims=dims, keepdim=keepdim))
        count = x.size // want.size
        mag = np.abs(x64) ** (2 if op == "vector_norm" else 1)
        scale = mag.sum(axis, keepdims=keepdim) / (count if op == "mean" else 1)
        err = np.abs(got - want) * (2 * want if op == "vector_norm" else 1)     # (of the sum of squares)
        bound = ((-(-count // 64) + 6) / 2 + 2) * EPS * scale     # (+ mean's 1.5 ulp, the root's 0.75)
        assert np.all(err <= bound + 1e-30), (shape, dims, (err / scale).max() / EPS)


@pytest.mark.parametrize("op,shape,attrs", [("mean", (1, 3, 426, 342), {"dims": [2, 3], "keepdim": True}),
                                            ("sum", (150001,), {"dims": None, "keepdim": False}),
                                            ("vector_norm", (2, 70001), {"dims": [1], "keepdim": False}),
                                            ("sum", (5, 4, 300), {"dims": [0, 2], "keepdim": False})])
def test_long_reductions_count_every_value(device, rows, op, shape, attrs):
    """Reductions over many values: every value is counted (llvmpipe stops one invocation's loops
    after 65535 iterations; one invocation an output used to sum only 21845 values of a global
    pool over 426x342, silently): the reference's bits (the canonical sum, 64 partials: within
    (count / 64 + 6) eps/2 sum |x| of float64's, not count eps). A sum of ones is exact. (rows: a
    subgroup or a workgroup an output.)"""
    x = rnd(*shape, lo=0.0, hi=2.0)          # no cancellation: sum |x| = sum x
    ref = get_op(op).reference(x, **attrs)
    got, _ = run_op(device, op, [x], attrs, ref.shape)
    np.testing.assert_array_equal(got, ref)
    axes = None if attrs["dims"] is None else tuple(attrs["dims"])
    x64 = x.astype(np.float64) ** (2 if op == "vector_norm" else 1)
    want = x64.sum(axes, keepdims=attrs["keepdim"])
    count = x.size // max(ref.size, 1)
    bound = ((-(-count // 64) + 6) / 2 + 2) * EPS * want
    r = ref.astype(np.float64) ** 2 if op == "vector_norm" else ref.astype(np.float64) * (count if op == "mean" else 1)
    assert np.all(np.abs(r - want) <= bound), (np.abs(r - want).max(), bound)
    ones = np.ones(shape, np.float32)
    got, _ = run_op(device, "sum", [ones], attrs if op != "vector_norm" else {"dims": [1], "keepdim": False},
                    ref.shape if op != "mean" else ref.shape)
    np.testing.assert_array_equal(got, np.full(got.shape, count, np.float32))


@pytest.mark.parametrize("budget,width", [(None, None), (1900, 16), (1800, None), (20, None)],
                         ids=["device", "sixteen_lanes", "past_sixteen_on_cpu", "on_cpu"])
def test_rows_past_the_loop_budget_widen_then_fall_back(device, monkeypatch, budget, width):
    """Rows too long for a lane's loop budget (llvmpipe: 65535 iterations, past which values
    are left out silently) take wider workgroups, up to the device's widest; past that the node
    runs on the CPU with a warning naming it, instead of failing to build or losing values.
    Softmax sums its rows in the canonical order (float_workgroup.glsl ROW_CANON: 16 partial
    vec4s), so a row takes at most 16 lanes and does not widen past them: a 10007-value row
    takes 1893 iterations a lane (vkq/ops/float.py's reckoning); a budget of 1900 runs it in a
    16-lane workgroup (or subgroup, where the device's is 16 lanes), 1800 and 20 on the CPU.
    "device": the device's own budget (llvmpipe's or none)."""
    from vkq.vkinfo import DeviceInfo
    if budget is not None:
        monkeypatch.setattr(DeviceInfo, "loop_budget", property(lambda self: budget))
    x = rnd(3, 10007, lo=-12, hi=12)
    prog = single_op_program("softmax", [("x", spec(x.shape))], [("y", spec(x.shape))], {"dim": -1}, {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ex = VulkanExecutor(prog, device)
    got, ref = ex(x), run_reference(prog, x)
    check(got, ref, ("fn", 1e-9, 2e-6))
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=2e-5)
    steps = [st for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps]
    if budget in (20, 1800):
        assert not steps and list(ex.cpu_reasons) == [0] and "loop iterations" in ex.cpu_reasons[0]
        assert [str(w.message) for w in caught if "runs on the CPU" in str(w.message)], caught
        from vkq.runtime import CompiledProgram
        compiled = CompiledProgram(prog, device)
        assert compiled.fallback_ops == []                    # not built yet: the program's own list
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.testing.assert_array_equal(compiled(x), got)
        ((op, why),) = compiled.fallback_ops                  # built: the device's too
        assert op == "softmax" and "loop iterations" in why and why.endswith("runs on the CPU")
        return
    (st,) = steps
    assert not ex.cpu_reasons and st.name == "float_softmax"
    if width is not None:      # 16 lanes a row: a subgroup where the device's is 16 wide (AVX-512), else a workgroup
        by_subgroup = "ROW_SUBGROUP" in st.defines and device.info.subgroup_size == width
        assert by_subgroup or (st.spec[0] == width and "ROW_WORKGROUP" in st.defines), (st.spec, st.defines)


# ---------------------------------------------------------------- copies

COPY_CASES = [
    ("reshape", [rnd(3, 5, 7)], {"shape": [15, 7]}, (15, 7)),
    ("permute", [rnd(3, 5, 7, 2)], {"dims": [2, 0, 3, 1]}, (7, 3, 2, 5)),
    ("transpose", [rnd(1, 17, 12, 32)], {"dim0": 1, "dim1": 2}, (1, 12, 17, 32)),
    ("transpose", [rnd(1, 12, 17, 32)], {"dim0": -1, "dim1": -2}, (1, 12, 32, 17)),
    ("expand", [rnd(3, 1, 7)], {"shape": [2, 3, 5, 7]}, (2, 3, 5, 7)),
    ("cat", [rnd(3, 2, 7), rnd(3, 5, 7), rnd(3, 1, 7)], {"dim": 1}, (3, 8, 7)),
]


@pytest.mark.parametrize("op,inputs,attrs,out_shape", COPY_CASES, ids=[c[0] + str(i) for i, c in enumerate(COPY_CASES)])
def test_copy(device, op, inputs, attrs, out_shape):
    got, ref = run_op(device, op, inputs, attrs, out_shape)
    check(got, ref, "exact")


# ---------------------------------------------------------------- conv2d (float, vkq/ops/conv.py)

# (x shape, weight shape, stride, padding, dilation, groups): tiles of 16, 8 and 4 channels with a
# part last tile (OCG 10, 3), depthwise (1), a channel multiplier (2 a group), strides,
# dilation, a few-channel stem, 1-D (H = 1) and (N, C) (batch norm's form), odd sizes
FLOAT_CONVS = [((2, 5, 9, 11), (10, 5, 3, 3), 1, 1, 1, 1), ((1, 6, 10, 10), (9, 2, 5, 3), 1, 2, 2, 3),
               ((1, 8, 13, 7), (8, 1, 3, 3), 2, 1, 1, 8), ((1, 4, 6, 9), (8, 1, 3, 3), 1, 0, 1, 4),
               ((1, 3, 29, 31), (16, 3, 7, 7), 2, 3, 1, 1), ((2, 7, 3, 2), (5, 7, 1, 1), 1, 0, 1, 1),
               ((2, 4, 17), (6, 4, 5), 2, 2, 1, 1), ((1, 6, 23), (6, 1, 3), 1, 2, 2, 6), ((5, 6), (6, 1), 1, 0, 1, 6),
               ((1, 5, 9, 37), (20, 5, 3, 3), 1, 1, 1, 1), ((1, 6, 8, 8), (36, 2, 1, 3), (1, 2), (0, 1), 1, 3),
               ((1, 8, 70), (8, 4, 65), 1, 32, 1, 2)]     # a long 1-D kernel: tiles cut to FLOAT_UNROLL


@pytest.mark.parametrize("tiles", ["cpu", "gpu"])
@pytest.mark.parametrize("weights", ["constant", "input"])
@pytest.mark.parametrize("case", FLOAT_CONVS, ids=[str(i) for i in range(len(FLOAT_CONVS))])
def test_conv2d_float(loads_device, case, weights, tiles, monkeypatch):
    """conv2d_float against the reference (float sums in another order: the dot bound over
    K = CG*KH*KW products and the bias), the reference against torch; weights packed
    constants or computed in the graph (a program input here: RAW); the register tiles of
    either device kind (16 or 8 channels with part tiles, 16 or 4 columns)."""
    import torch
    import torch.nn.functional as F
    from vkq.ops import conv
    monkeypatch.setattr(conv, "FLOAT_TILES_FORCE", tiles)
    xs, ws, s, p, d, g = case
    x, w, b = rnd(*xs), rnd(*ws, lo=-1, hi=1), rnd(ws[0])
    rank = len(xs)
    pair = lambda v, lead: list(v) if isinstance(v, tuple) else [v if rank == 4 else lead, v]   # noqa: E731
    attrs = {"stride": pair(s, 1), "padding": pair(p, 0), "dilation": pair(d, 1), "groups": g}
    s, p, d = (tuple(a) if rank == 4 else a[1] for a in (attrs["stride"], attrs["padding"], attrs["dilation"]))
    t = torch.from_numpy
    want = (F.conv2d(t(x), t(w), t(b), s, p, d, g) if rank == 4 else F.conv1d(t(x), t(w), t(b), s, p, d, g)
            if rank == 3 else t(x * w[:, 0] + b)).numpy()
    ins, consts = ([x], [w, b]) if weights == "constant" else ([x, w, b], [])
    steps = []
    got, ref = run_op(loads_device, "conv2d", ins, attrs, want.shape, constants=consts, steps=steps)
    assert len(steps) == 1                                  # on the device
    from vkq.ops.conv import conv2d_float
    scale = conv2d_float(np.abs(x), np.abs(w), np.abs(b), **attrs)
    check(ref, want, ("dot", int(np.prod(ws[1:])) + 1), scale)     # (torch sums in float32 too: the same bound,
    check(got, ref, ("dot", int(np.prod(ws[1:])) + 1), scale)      # not a fixed 1e-5, which data near 0 broke)


def test_conv2d_float_declines_a_weight_that_does_not_fit():
    """A float conv whose weight does not fit its input runs its reference on the CPU (which then
    fails as torch would), with a reason naming conv2d and the shapes."""
    from vkq.program import Node, TensorSpec
    from vkq.registry import cpu_reason
    tensors = {"x": TensorSpec((1, 6, 5, 5)), "w": TensorSpec((4, 4, 3, 3)), "b": TensorSpec((4,)),
               "y": TensorSpec((1, 4, 3, 3))}
    node = Node("conv2d", ["x", "w", "b"], ["y"], {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1],
                                                   "groups": 1}, "conv")
    why = cpu_reason(node, tensors)
    assert why is not None and why.startswith("conv2d: ValueError: conv2d: weight (4, 4, 3, 3) does not fit 6"), why


# (input shape, kernel, stride, padding, dilation, ceil_mode): ResNet's stem pool, ceil_mode
# windows hanging over the edge, dilation, a 3-D input, -inf-free odd sizes
FLOAT_MAX_POOLS = [((2, 5, 17, 15), 3, 2, 1, 1, 0), ((1, 3, 10, 11), 2, 2, 0, 1, 1), ((1, 4, 9, 9), 3, 1, 1, 2, 0),
                   ((6, 7, 5), (3, 2), (2, 1), (1, 0), 1, 1), ((1, 2, 4, 6), 4, 4, 0, 1, 0)]


@pytest.mark.parametrize("case", FLOAT_MAX_POOLS, ids=[str(i) for i in range(len(FLOAT_MAX_POOLS))])
def test_max_pool2d_float(device, case):
    """The float max pool (conv2d_float's MAX variant): the same bits as the reference and
    as torch."""
    import torch
    import torch.nn.functional as F
    from vkq.ops.pool import max_pool2d_params
    shape, k, s, p, d, ceil = case
    x = rnd(*shape)
    want = F.max_pool2d(torch.from_numpy(x), k, s, p, d, bool(ceil)).numpy()
    steps = []
    got, ref = run_op(device, "max_pool2d", [x], max_pool2d_params(k, s, p, d, ceil), want.shape, steps=steps)
    assert len(steps) == 1
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, ref)


# (input shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
# PoolFormer's 3x3 s1 without the padding counted, ceil_mode overhang (a window cut by the
# padded edge), strides, an override, a 3-D input
FLOAT_AVG_POOLS = [((2, 5, 11, 9), 3, 1, 1, 0, 0, None), ((1, 3, 10, 11), 3, 2, 1, 1, 1, None),
                   ((1, 4, 9, 13), (2, 3), (2, 2), (1, 1), 1, 0, None), ((6, 7, 5), 2, 2, 0, 0, 1, 3),
                   ((1, 2, 8, 8), 4, 4, 0, 0, 1, None)]


@pytest.mark.parametrize("case", FLOAT_AVG_POOLS, ids=[str(i) for i in range(len(FLOAT_AVG_POOLS))])
def test_avg_pool2d_float(device, case):
    """The float average pool (conv2d_float's AVG variant): the reference equals torch; the
    device sums in the same order and divides within Vulkan's 2.5 ulp."""
    import torch
    import torch.nn.functional as F
    from vkq.ops.pool import avg_pool2d_geometry
    shape, k, s, p, ceil, cip, override = case
    x = rnd(*shape)
    want = F.avg_pool2d(torch.from_numpy(x), k, s, p, bool(ceil), bool(cip), override).numpy()
    steps = []
    got, ref = run_op(device, "avg_pool2d", [x], avg_pool2d_geometry(k, s, p, ceil, cip, override), want.shape,
                      steps=steps)
    assert len(steps) == 1
    np.testing.assert_array_equal(ref, want)
    check(got, ref, ("ulp", 3))


# ---------------------------------------------------------------- without a device

def test_float_ops_run_on_vulkan_and_shape_ops_have_one_name():
    for name in ("layer_norm", "softmax", "gelu", "add", "matmul", "sum", "vector_norm", "clamp", "reshape",
                 "permute", "transpose", "cat", "expand", "conv2d"):
        assert get_op(name).on_vulkan, name
    for name in ("linear", "torch_op"):
        assert not get_op(name).on_vulkan, name
    for twin in ("reshape_f32", "permute_f32", "transpose_f32", "cat_f32", "expand_f32"):
        with pytest.raises(KeyError):
            get_op(twin)


def test_erf_and_exp_approximations_are_as_accurate_as_stated():
    """The numpy twins of the shaders' erf_f32 and exp_f32, evaluated in float32."""
    x = np.linspace(-6, 6, 200_003).astype(np.float32)
    want = np.array([math.erf(float(v)) for v in x])
    assert np.abs(float_math.erf_f32(x).astype(np.float64) - want).max() <= 4.2e-7     # the exact twin (flushed, in its fixed order): 4.11e-7
    x = np.linspace(-87, 88, 200_003).astype(np.float32)
    want = np.exp(x.astype(np.float64))
    assert (np.abs(float_math.exp_f32(x) - want) / want).max() <= 2 * EPS


def test_reshape_view():
    assert float_rewrites.reshape_view([2, 3, 4], [12, 4, 1], [6, 4]) == [4, 1]
    assert float_rewrites.reshape_view([2, 3, 4], [12, 4, 1], [2, 3, 2, 2]) == [12, 4, 2, 1]
    assert float_rewrites.reshape_view([3, 2], [1, 3], [6]) is None                      # a transposed view
    assert float_rewrites.reshape_view([1, 5, 12, 32], [1920, 32, 160, 1], [1, 5, 384]) is None
    assert float_rewrites.reshape_view([5, 12, 32], [384, 32, 1], [1, 5, 12, 32])[1:] == [384, 32, 1]


def test_fold_views_into_matmul():
    """The attention pattern: reshape -> transpose -> matmul <- transpose <- transpose <- reshape,
    and transpose -> reshape after the second matmul: every copy folds, the result is the same."""
    from vkq.executor import run_reference
    from vkq.program import Node, Program
    l, h, d = 7, 3, 4
    t = {n: spec(s) for n, s in [("q", (1, l, h * d)), ("k", (1, l, h * d)), ("v", (1, l, h * d)),
                                 ("q4", (1, l, h, d)), ("qh", (1, h, l, d)), ("k4", (1, l, h, d)),
                                 ("kh", (1, h, l, d)), ("kt", (1, h, d, l)), ("s", (1, h, l, l)),
                                 ("v4", (1, l, h, d)), ("vh", (1, h, l, d)), ("c", (1, h, l, d)),
                                 ("ct", (1, l, h, d)), ("out", (1, l, h * d))]}
    nodes = [Node("reshape", ["q"], ["q4"], {"shape": [1, l, h, d]}),
             Node("transpose", ["q4"], ["qh"], {"dim0": 1, "dim1": 2}),
             Node("reshape", ["k"], ["k4"], {"shape": [1, l, h, d]}),
             Node("transpose", ["k4"], ["kh"], {"dim0": 1, "dim1": 2}),
             Node("transpose", ["kh"], ["kt"], {"dim0": 2, "dim1": 3}),
             Node("matmul", ["qh", "kt"], ["s"]),
             Node("reshape", ["v"], ["v4"], {"shape": [1, l, h, d]}),
             Node("permute", ["v4"], ["vh"], {"dims": [0, 2, 1, 3]}),
             Node("matmul", ["s", "vh"], ["c"]),
             Node("transpose", ["c"], ["ct"], {"dim0": 1, "dim1": 2}),
             Node("reshape", ["ct"], ["out"], {"shape": [1, l, h * d]})]
    prog = Program(t, nodes, ["q", "k", "v"], ["out"])
    xs = [rnd(1, l, h * d) for _ in range(3)]
    want = run_reference(prog, *xs)
    assert float_rewrites.fold_views_into_matmul(prog) == 2
    assert [n.op for n in prog.nodes] == ["matmul_strided", "matmul_strided"]
    assert prog.nodes[0].inputs == ["q", "k"] and prog.nodes[1].inputs == ["s", "v"]
    assert set(prog.tensors) == {"q", "k", "v", "s", "out"}
    prog.validate()
    np.testing.assert_allclose(run_reference(prog, *xs), want, rtol=1e-6, atol=1e-6)


def test_fold_scale_mask_into_softmax():
    from vkq.executor import run_reference
    from vkq.program import Node, Program
    t = {n: spec(s) for n, s in [("s", (1, 3, 5, 5)), ("m", (1, 1, 5, 5)), ("s2", (1, 3, 5, 5)),
                                 ("s3", (1, 3, 5, 5)), ("p", (1, 3, 5, 5))]}
    nodes = [Node("mul", ["s"], ["s2"], {"scalar": 0.5, "alpha": 1}), Node("add", ["m", "s2"], ["s3"], {"alpha": 1}),
             Node("softmax", ["s3"], ["p"], {"dim": -1})]
    prog = Program(t, nodes, ["s", "m"], ["p"])
    xs = [rnd(1, 3, 5, 5), np.where(R.random((1, 1, 5, 5)) < 0.3, -1e30, 0).astype(np.float32)]
    want = run_reference(prog, *xs)
    assert float_rewrites.fold_scale_mask_into_softmax(prog) == 1
    assert [(n.op, n.inputs, n.attrs) for n in prog.nodes] == [("softmax_masked", ["s", "m"], {"scale": 0.5})]
    assert set(prog.tensors) == {"s", "m", "p"}
    np.testing.assert_array_equal(run_reference(prog, *xs), want)


FQ = {"scale": 0.0625, "zero_point": -3, "qmin": -128, "qmax": 127}   # a fake_quantize's attrs


def test_fold_fake_quantize():
    """fake_quantize folds into the float op before it (attr fq) where that op's result has no
    other reader and its kernel has the epilogue: the bias add's pair folds; the matmul's does
    not (its scores are also read by the mul), nor the pair after the softmax, nor one whose
    input is a program output. The reference is the same bits."""
    from vkq.executor import run_reference
    from vkq.program import Node, Program
    shp = (1, 3, 5, 5)
    names = ["q", "k", "s", "bias", "s1", "s2", "s3", "p", "p2", "o", "o2", "t"]
    t = {n: spec(shp) for n in names}
    fq = lambda x, y, name: Node("fake_quantize", [x], [y], dict(FQ), name=name)
    nodes = [Node("matmul", ["q", "k"], ["s"], {}, name="mm"), fq("s", "s1", "fq0"),
             Node("mul", ["s"], ["t"], {"scalar": 2.0}, name="mul"),
             Node("add", ["s1", "bias"], ["s2"], {"alpha": 1}, name="add"), fq("s2", "s3", "fq1"),
             Node("softmax", ["s3"], ["p"], {"dim": -1}, name="sm"), fq("p", "p2", "fq2"),
             Node("sub", ["p2", "q"], ["o"], {"alpha": 1}, name="sub"), fq("o", "o2", "fq3")]
    prog = Program(t, nodes, ["q", "k", "bias"], ["o", "o2", "t"])
    xs = [rnd(*shp), rnd(*shp), rnd(*shp)]
    want = run_reference(prog, *xs)
    assert float_rewrites.fold_fake_quantize(prog) == 1
    assert [(n.name, n.op, n.outputs, n.attrs.get("fq")) for n in prog.nodes if n.op != "fake_quantize"] == \
        [("mm", "matmul", ["s"], None), ("mul", "mul", ["t"], None), ("add", "add", ["s3"], FQ),
         ("sm", "softmax", ["p"], None), ("sub", "sub", ["o"], None)]
    assert "s2" not in prog.tensors
    prog.validate()
    for got, w in zip(run_reference(prog, *xs), want):
        np.testing.assert_array_equal(got, w)


def test_fold_broadcast_expands():
    """An expand read only by float binary ops folds into them (they broadcast its input) where
    each op's output keeps its shape: F.normalize's x / n.expand_as(x) folds, and a row's expand
    into an add and a mul; the column's expand into that add does not (with the row's folded, the
    add's inputs would broadcast to (4, 1, 8), less than its output), nor an expand read by a
    softmax, nor one that is a program output. The same values."""
    from vkq.program import Node, Program
    t = {"x": spec((4, 3, 8)), "n": spec((4, 3, 1)), "r": spec((1, 8)), "c": spec((4, 1, 1)),
         "ne": spec((4, 3, 8)), "y": spec((4, 3, 8)), "re": spec((4, 3, 8)), "ce": spec((4, 3, 8)),
         "z": spec((4, 3, 8)), "w": spec((4, 3, 8)), "se": spec((4, 3, 8)), "sm": spec((4, 3, 8)),
         "oe": spec((4, 3, 8)), "u": spec((4, 3, 8))}
    ex = lambda a, b, name: Node("expand", [a], [b], {"shape": [4, 3, 8]}, name=name)
    nodes = [ex("n", "ne", "e_norm"), Node("div", ["x", "ne"], ["y"], {"alpha": 1}, name="div"),
             ex("r", "re", "e_row"), ex("c", "ce", "e_col"),
             Node("add", ["re", "ce"], ["z"], {"alpha": 1}, name="add"),        # (1, 8) + (4, 1, 1): (4, 1, 8)
             Node("mul", ["y", "re"], ["w"], {"alpha": 1}, name="mul"),
             ex("c", "se", "e_sm"), Node("softmax", ["se"], ["sm"], {"dim": -1}, name="softmax"),
             ex("n", "oe", "e_out"), Node("sub", ["x", "oe"], ["u"], {"alpha": 1}, name="sub")]
    prog = Program(t, nodes, ["x", "n", "r", "c"], ["y", "z", "w", "sm", "oe", "u"])
    xs = [rnd(4, 3, 8), rnd(4, 3, 1, lo=0.5), rnd(1, 8), rnd(4, 1, 1)]
    want = run_reference(prog, *xs)
    # (a dynamic program's other shapes: `keep` names what stayed at the upper bounds, the
    # readers among them, which stay too; a kept expand is not folded, so the column's can be)
    kept = copy.deepcopy(prog)
    assert float_rewrites.fold_broadcast_expands(kept, keep={"e_row", "div", "add", "mul"}) == 2
    assert [n.name for n in kept.nodes if n.op == "expand"] == ["e_row", "e_sm", "e_out"]
    assert float_rewrites.fold_broadcast_expands(prog) == 2
    assert {n.name: n.inputs for n in prog.nodes if n.op != "expand"} == {
        "div": ["x", "n"], "add": ["r", "ce"], "mul": ["y", "r"], "softmax": ["se"], "sub": ["x", "oe"]}
    assert [n.name for n in prog.nodes if n.op == "expand"] == ["e_col", "e_sm", "e_out"]
    assert "ne" not in prog.tensors and "re" not in prog.tensors
    prog.validate()
    for got, w in zip(run_reference(prog, *xs), want):
        np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("a_shape,b_shape,path", [((37,), (37,), "CONTIG"), ((5, 3, 7, 9), (3, 7, 9), "FLAT"),
                                                  ((2, 3, 5, 3), (1, 1, 1, 3), "ROWS"), ((4, 3, 1), (4, 3, 6), None)])
def test_binary_with_a_fake_quantize(loads_device, a_shape, b_shape, path):
    """A folded fake_quantize (attr fq) on each path of float_binary: the sum quantized and
    dequantized before its store, the same bits as the reference (an exact add, then the pair);
    values past the int8 range clamp, so some saturate."""
    steps = []
    a, b = rnd(*a_shape, lo=-6, hi=6), rnd(*b_shape, lo=-6, hi=6)
    a.reshape(-1)[:2], b.reshape(-1)[:2] = (6, -6), (6, -6)     # (output 0 is 12: saturates, whatever the draw)
    got, ref = run_op(loads_device, "add", [a, b], {"alpha": 1, "fq": FQ}, np.broadcast_shapes(a_shape, b_shape),
                      steps=steps)
    np.testing.assert_array_equal(ref, fake_quantize(a + b, **FQ))
    np.testing.assert_array_equal(got, ref)
    assert tuple(steps[0].spec)[1] == 1 and (path is None or path in steps[0].defines), (steps[0].defines, steps[0].spec)
    ends = np.float32([(-128 + 3) * 0.0625, (127 + 3) * 0.0625])
    assert np.any(np.isin(ref, ends)) and len(np.unique(ref)) > min(100, ref.size // 4)   # (of 256 levels)


@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 17, 32), (2, 3, 32, 17)),     # VEC_K (scores)
                                             ((2, 3, 17, 17), (2, 3, 17, 8)),      # VEC_KN, rows off vec4s
                                             ((3, 5, 9), (9, 6))])                 # GENERAL
def test_matmul_with_a_fake_quantize(loads_device, a_shape, b_shape):
    """A folded fake_quantize on float_matmul: the kernel's own float sums, quantized and
    dequantized before the store, are the same bits as the pair applied to its output without
    the fold, and the reference's (matmul_f32 sums in the kernel's order)."""
    device, steps = loads_device, []
    a, b = rnd(*a_shape), rnd(*b_shape)
    out = np.matmul(a, b).shape
    fq = {**FQ, "scale": 0.0234}
    plain, _ = run_op(device, "matmul", [a, b], {}, out, steps=steps)
    got, ref = run_op(device, "matmul", [a, b], {"fq": fq}, out, steps=steps)
    np.testing.assert_array_equal(got, fake_quantize(plain, **fq))
    np.testing.assert_array_equal(got, ref)
    assert [tuple(st.spec)[2] for st in steps] == [0, 1] and steps[0].defines == steps[1].defines, steps


def test_merge_dims():
    assert fops.merge_dims([2, 3, 4], [12, 4, 1], [12, 4, 1]) == ([24], [[1], [1]])
    assert fops.merge_dims([2, 3, 4], [12, 4, 1], [0, 4, 1]) == ([2, 12], [[12, 1], [0, 1]])
    assert fops.merge_dims([1, 1], [1, 1]) == ([1], [[0]])
    assert fops.broadcast_strides((3, 1, 7), (2, 3, 5, 7)) == [0, 7, 0, 1]


# ---------------------------------------------------------------- group norm, attention

@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 7), 3), ((1, 8, 3, 3), 8), ((3, 4, 11), 1),
                                          ((3, 16), 2)])       # one value a channel: the vec4 path
def test_group_norm(loads_device, lane_rows, shape, groups):
    device, steps = loads_device, []
    x = rnd(*shape) * 3 + 0.5
    c = shape[1]
    w, b = rnd(c), rnd(c)
    got, ref = run_op(device, "group_norm", [x], {"groups": groups, "eps": 1e-5}, shape, constants=[w, b],
                      steps=steps)
    row_owner(steps, device, lane_rows, int(np.prod(shape[1:])) // groups, float_norm.ROW_LANE_NORM)
    np.testing.assert_array_equal(got, ref)       # (bit-exact: tests/test_exact_float.py)
    import torch
    want = torch.nn.functional.group_norm(torch.from_numpy(x), groups, torch.from_numpy(w), torch.from_numpy(b), 1e-5)
    check(got, want.numpy(), ("fn", 1e-5, 1e-5))


def sdpa_inputs(batch, L, S, E, Ev=None):
    return rnd(*batch, L, E), rnd(*batch, S, E), rnd(*batch, S, Ev or E)


SDPA_CASES = [   # q, k, v shapes; mask; attrs
    ("plain", sdpa_inputs((2, 3), 7, 7, 8), None, {"causal": False, "mask_kind": "none"}),
    ("causal", sdpa_inputs((1, 4), 9, 9, 16), None, {"causal": True, "mask_kind": "none"}),
    ("cross", sdpa_inputs((2, 1), 5, 13, 8, 12), None, {"causal": False, "mask_kind": "none"}),
    ("float mask", sdpa_inputs((2, 2), 6, 6, 4), rnd(2, 1, 1, 6, lo=-9, hi=0), {"causal": False, "mask_kind": "float"}),
    ("bool mask", sdpa_inputs((2, 3), 11, 11, 8), (R.random((2, 1, 11, 11)) > 0.3), {"causal": False, "mask_kind": "bool"}),
    ("rank 3", sdpa_inputs((5,), 3, 17, 4), None, {"causal": False, "mask_kind": "none"}),
    # key lengths of whole vec4s: softmax's vec4 path (and float_matmul's VEC_K / VEC_KN)
    ("bool mask vec4", sdpa_inputs((1, 2), 8, 12, 8), (R.random((1, 1, 8, 12)) > 0.3), {"causal": False, "mask_kind": "bool"}),
    ("causal vec4", sdpa_inputs((1, 2), 16, 16, 8), None, {"causal": True, "mask_kind": "none"}),
]


@pytest.mark.parametrize("name,qkv,mask,attrs", SDPA_CASES, ids=[c[0] for c in SDPA_CASES])
def test_scaled_dot_product_attention(loads_device, rows, name, qkv, mask, attrs):
    """Against the reference (float rounding) and against PyTorch's own attention."""
    device = loads_device
    import torch
    import torch.nn.functional as F
    q, k, v = qkv
    attrs = dict(attrs, scale=1 / math.sqrt(q.shape[-1]))
    inputs = [q, k, v] + ([] if mask is None else [mask.astype(np.int32) if mask.dtype == bool else mask])
    names = [f"x{i}" for i in range(len(inputs))]
    out_shape = q.shape[:-1] + (v.shape[-1],)
    prog = single_op_program("scaled_dot_product_attention",
                             [(n, spec(a.shape, "int32" if a.dtype == np.int32 else "float32")) for n, a in zip(names, inputs)],
                             [("y", spec(out_shape))], attrs)
    got = VulkanExecutor(prog, device)(*inputs)
    ref = run_reference(prog, *inputs)
    np.testing.assert_array_equal(got, ref)           # (bit-exact: matmul_f32, softmax_masked)
    t = lambda a: torch.from_numpy(a)
    want = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=None if mask is None else t(mask),
                                          is_causal=attrs["causal"]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6)


@pytest.mark.parametrize("S", [7, 13, 17, 197])
@pytest.mark.parametrize("kind", ["none", "key mask", "causal"])
def test_attention_at_any_key_length_takes_the_vec4_paths(loads_device, rows, S, kind):
    """Attention pads its score rows to a multiple of 4 words, so at a key length that is not
    one the softmax and p @ v still run their vec4 paths (before: value by value, and
    float_matmul GENERAL: ViT's 197 tokens 2.1 -> 0.4 ms for p @ v on lavapipe); a mask whose
    rows are not vec4s (a (B, 1, 1, S) key mask, the causal mask) is read word by word (VEC 2).
    The same attention over the keys padded to a multiple of 4 with masked (-inf) keys gives the
    same bits: what a sentence run at its own length gives in a padded batch."""
    device, steps = loads_device, []
    L = S if kind == "causal" else 5
    q, k, v = sdpa_inputs((2, 2), L, S, 8)
    s4 = -(-S // 4) * 4
    key_mask = np.where(R.random((2, 1, 1, S)) < 0.2, -1e9, 0).astype(np.float32)
    inputs = [q, k, v] + ([key_mask] if kind == "key mask" else [])
    attrs = {"causal": kind == "causal", "mask_kind": "float" if kind == "key mask" else "none", "scale": 0.35}
    got, ref = run_op(device, "scaled_dot_product_attention", inputs, attrs, (2, 2, L, 8), steps=steps)
    np.testing.assert_array_equal(got, ref)           # (bit-exact: matmul_f32, softmax_masked)
    qk, sm, pv = steps
    assert sm.name == "float_softmax" and sm.spec[2] == (1 if kind == "none" else 2), sm.spec     # VEC
    assert pv.name == "float_matmul" and "VEC_KN" in pv.defines, pv.defines
    pad = lambda a: np.concatenate([a, rnd(*a.shape[:-2], s4 - S, a.shape[-1])], -2)
    mask = np.broadcast_to(np.where(np.arange(s4) < S, 0, -np.inf).astype(np.float32), (2, 1, L, s4)).copy()
    if kind == "key mask":
        mask[..., :S] += key_mask
    if kind == "causal":
        mask[..., :S] += np.triu(np.full((L, S), -np.inf, np.float32), 1)
    padded, _ = run_op(device, "scaled_dot_product_attention", [q, pad(k), pad(v), mask],
                       dict(attrs, mask_kind="float", causal=False), (2, 2, L, 8))
    np.testing.assert_array_equal(got, padded)


@pytest.mark.parametrize("op", ["hardswish", "hardsigmoid"])
def test_hard_activation_references_are_torch(op):
    """The float references (float32 throughout) equal ATen's on the CPU bit for bit, either
    side of the kinks at -3 and 3 too."""
    import torch
    x = np.concatenate([rnd(4, 97, lo=-6, hi=6), np.float32([-3, 3, -2.9999998, 3.0000002, 0])[None].repeat(4, 0)], 1)
    want = getattr(torch.nn.functional, op)(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(get_op(op).reference(x), want)


@pytest.mark.parametrize("shape,size", [((2, 5, 13, 17), (6, 4)), ((3, 7, 9), (3, 5)), ((1, 4, 16, 16), (6, 6)),
                                        ((1, 3, 5, 4), (7, 4)), ((1, 2, 8, 8), (2, 2))])
def test_adaptive_avg_pool2d_float(device, shape, size):
    """Adaptive average pools with uneven windows (PSPNet's pyramid: 6 over 16; 6 x 4 over 13 x 17),
    output larger than the input (windows overlap), 3-D input, against torch's windows written
    out here (floor(i H / OH) .. ceil((i + 1) H / OH)) within float rounding."""
    x = rnd(*shape)
    got, ref = run_op(device, "adaptive_avg_pool2d", [x], {"output_size": list(size)}, shape[:-2] + size)
    (h, w), (oh, ow) = shape[-2:], size
    want = np.empty(shape[:-2] + size)
    for i in range(oh):
        for j in range(ow):
            hs, he = i * h // oh, -(-(i + 1) * h // oh)
            ws, we = j * w // ow, -(-(j + 1) * w // ow)
            want[..., i, j] = x[..., hs:he, ws:we].astype(np.float64).mean(axis=(-2, -1))
    np.testing.assert_array_equal(ref, want.astype(np.float32))
    check(got, ref, ("bound", 4 * EPS * np.abs(x).max()))


@pytest.mark.parametrize("shape,size", [((2, 5, 13, 17), (6, 4)), ((3, 7, 9), (3, 5)), ((1, 3, 5, 4), (7, 4)),
                                        ((2, 3, 17), (3, 1))])
def test_adaptive_max_pool2d_float(device, shape, size):
    """Adaptive max pools on float32 with uneven windows, overlapping ones (output larger than the
    input), 3-D input and a 1-D pool seen as rows (aten_float.py: (N, C, L) as (C, L) planes): equal to
    torch's adaptive_max_pool2d, a NaN in a window included (as ATen: the window's value is NaN)."""
    import torch
    x = rnd(*shape)
    x.reshape(-1)[5] = np.nan
    got, ref = run_op(device, "adaptive_max_pool2d", [x], {"output_size": list(size)}, shape[:-2] + size)
    want = torch.nn.functional.adaptive_max_pool2d(torch.from_numpy(x), size).numpy()
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(want).sum() >= 1 and np.isfinite(want).sum() > want.size // 2


@pytest.mark.parametrize("op", ["amax", "amin"])
@pytest.mark.parametrize("shape,dims,keepdim", [((3, 5, 37), [-1], False), ((2, 3, 31, 29), [2, 3], True),
                                                ((4, 300), None, False), ((5, 4, 3), [0, 2], False)])
def test_amax_amin(device, rows, op, shape, dims, keepdim):
    """max / min over dims, exact, by one invocation an output (short rows) or a subgroup /
    workgroup (from REDUCE_ROW values): equal to numpy, and NaN where a reduced value is NaN."""
    x = rnd(*shape, lo=-50, hi=50)
    want = getattr(np, op)(x, axis=None if dims is None else tuple(dims), keepdims=keepdim)
    got, ref = run_op(device, op, [x], {"dims": dims, "keepdim": keepdim}, np.shape(want))
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)
    x.reshape(-1)[7] = np.nan
    want = getattr(np, op)(x, axis=None if dims is None else tuple(dims), keepdims=keepdim)
    got, _ = run_op(device, op, [x], {"dims": dims, "keepdim": keepdim}, np.shape(want))
    np.testing.assert_array_equal(got, want)          # (assert_array_equal: NaN where numpy has NaN)
    assert np.isnan(got).sum() == np.isnan(want).sum() >= 1


@pytest.mark.parametrize("e", [0.75, -0.75, 4.0, 5.0, -5.0, -1.5, 0.0, 1e-3, 40.0, -45.0])
def test_pow_special_values_as_torch(device, e):
    """pow by exp(e log|x|) keeps C's rules: 0 and -0 (the sign through odd powers), +-inf
    (-inf ^ 0.75 = inf), x < 0 with a fractional e NaN, with an integer e signed, x ^ 0 = 1 (NaN
    too), overflow to inf and underflow to 0."""
    import torch
    x = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, np.inf, -np.inf, np.nan, 1e-30, 1e30, -8.0, -3e-20, 7.5], np.float32)
    got, _ = run_op(device, "pow", [x], {"exponent": e}, x.shape)
    want = torch.pow(torch.from_numpy(x), e).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    num = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))
    np.testing.assert_array_equal(np.isinf(got[num]), np.isinf(want[num]))
    # (subnormal results may flush to 0: SwiftShader's do, as Vulkan allows)
    np.testing.assert_allclose(got[num], want[num], rtol=300 * EPS, atol=np.finfo(np.float32).tiny)


@pytest.mark.parametrize("op,attrs", [("exp", {}), ("sigmoid", {}), ("silu", {}), ("tanh", {}), ("elu", {"alpha": 1.0}),
                                      ("softplus", {"beta": 1.0, "threshold": 20.0}), ("mish", {}), ("log", {}),
                                      ("sin", {}), ("cos", {}), ("log1p", {}), ("log2", {}), ("pow", {"exponent": 0.75}),
                                      ("erf", {}), ("gelu", {"approximate": "none"}), ("gelu", {"approximate": "tanh"})])
def test_exp_based_ops_keep_nan(device, op, attrs):
    """A NaN stays NaN through every op built on exp_f32 / log_f32 (a clamp by max / min made
    exp(NaN) = exp(-87.3): sigmoid, softplus or ELU of NaN were numbers); the numbers around it
    as torch's, to the accuracy test_unary states; past exp's range inf and 0 as torch's (exp(-inf)
    was 1.2e-38, exp(100) FLT_MAX, silu(-1e30) -1.2e-8), erf(NaN) NaN (it was -1)."""
    import torch
    x = np.array([np.nan, 0.0, 1.5, -2.5, 30.0, -30.0, 1e-3, 80.0, -80.0, np.nan,
                  np.inf, -np.inf, 89.0, 100.0, -110.0, 1e30, -1e30, 3e38, -3e38], np.float32)
    if op in ("pow", "gelu"):   # (pow: its bound grows with |ln x|; gelu: x + 0.044715 x^3 ordered its own way)
        x = x[np.isnan(x) | (np.abs(x) < 8192)]
    x = np.abs(x) if op in ("log", "log2", "pow") else x
    got, _ = run_op(device, op, [x], attrs, x.shape)
    fn = {"exp": torch.exp, "sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu, "tanh": torch.tanh,
          "elu": torch.nn.functional.elu, "softplus": torch.nn.functional.softplus,
          "mish": torch.nn.functional.mish, "log": torch.log, "sin": torch.sin, "cos": torch.cos,
          "log1p": torch.log1p, "log2": torch.log2, "pow": lambda t: torch.pow(t, 0.75), "erf": torch.erf,
          "gelu": lambda t: torch.nn.functional.gelu(t, **attrs)}[op]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = fn(torch.from_numpy(x)).numpy()
    if op == "gelu":
        want = np.where(np.isposinf(x), np.inf, want)     # (torch's gelu(inf) is NaN: inf * 0.5 * 2 here)
    if op == "silu":
        want = np.where(np.isneginf(x), np.float32(-0.0), want)    # (torch's silu(-inf) is NaN: -0 here)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(np.isinf(got[finite]), np.isinf(want[finite]))
    np.testing.assert_allclose(got[finite], want[finite], rtol=8 * EPS, atol=1e-6)


@pytest.mark.parametrize("op", ["atan", "asin", "acos", "tan", "sinh", "cosh", "asinh", "acosh", "atanh", "expm1",
                                "exp2", "log10", "erfc", "lgamma", "digamma", "erfinv"])
def test_inverse_hyperbolic_and_gamma_special_values_as_torch(device, op):
    """Zeros keep their sign (atan(-0) = -0), infinities and the ends of each domain give torch's
    values (atanh(+-1) = +-inf, acosh(inf) = inf, asin(1.5) NaN, cosh(89) finite where e^89 is
    not, expm1(-inf) = -1, lgamma inf at 0, -1 and -inf, digamma(-0) = inf and NaN at -1,
    erfinv(1) = inf), a NaN stays NaN; the numbers among them to test_unary's accuracy."""
    import torch
    x = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.0, 1e-30, -1e-30,
                  1e30, -1e30, 89.0, -89.0, 100.0, -200.0, 5000.0, 0.9999999], np.float32)
    got, _ = run_op(device, op, [x], {}, x.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = getattr(torch, op)(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    num = ~np.isnan(want)
    np.testing.assert_array_equal(np.isinf(got[num]), np.isinf(want[num]))
    np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))
    # (results below the smallest normal may flush to 0: SwiftShader's do, as Vulkan allows)
    # (torch's float32 digamma is itself 4 ulp off at 1; near their zeros both leave ~1e-7 absolute)
    atol = 1e-6 if op in ("lgamma", "digamma") else np.finfo(np.float32).tiny
    np.testing.assert_allclose(got[num], want[num], rtol=5 * EPS, atol=atol)


@pytest.mark.parametrize("op", ["i0", "i0e", "i1", "i1e", "ndtri", "erfcx"])
def test_bessel_ndtri_erfcx_special_values(device, op):
    """The ends of each domain and the infinities give the function's values (scipy.special's, in
    float64 rounded to float32, except I0(+-inf) = inf, I1(+-inf) = +-inf, where scipy and torch give
    NaN); torch's float32 kernels agree except there and from 88.7 to 91.9 (inf there: their e^x
    overflows first)."""
    import scipy.special as sp
    import torch
    x = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 0.5, 1e-30, -1e-30, 8.0, -8.0, 8.000001,
                  30.0, 89.0, -91.0, 92.0, 1e30, -9.0, -9.5, 0.135335, 0.864665, 1e-37, 0.9999999], np.float32)
    got, _ = run_op(device, op, [x], {}, x.shape)
    fn = {"i0": sp.i0, "i0e": sp.i0e, "i1": sp.i1, "i1e": sp.i1e, "ndtri": sp.ndtri, "erfcx": sp.erfcx}[op]
    with np.errstate(all="ignore"):
        want = fn(x.astype(np.float64)).astype(np.float32)
    if op in ("i0", "i1"):          # (scipy's Cephes, like torch, gives NaN at +-inf: inf * 0 / inf)
        want[np.isinf(x)] = np.inf if op == "i0" else x[np.isinf(x)]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    num = ~np.isnan(want)
    np.testing.assert_array_equal(np.isinf(got[num]), np.isinf(want[num]))
    np.testing.assert_array_equal(np.signbit(got[num] * (got[num] != 0)), np.signbit(want[num] * (want[num] != 0)))
    np.testing.assert_allclose(got[num], want[num], rtol=8 * EPS, atol=np.finfo(np.float32).tiny)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = getattr(torch.special, op)(torch.from_numpy(x)).numpy()
    same = ~((np.abs(x) > 88.7) & (op in ("i0", "i1")))       # (+-inf among them)
    np.testing.assert_allclose(got[same], t[same], rtol=32 * EPS, atol=np.finfo(np.float32).tiny, equal_nan=True)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 20, 34])
def test_polygamma(device, n):
    """polygamma(n, x) = (-1)^(n+1) n! zeta(n + 1, x) (float_math.glsl): within (4 + n) ulp above 0;
    below 0, where the reflection's two terms cancel near its zeros, within (6 + n) ulp of their
    size, n! (d^-(n+1) + 2) (d: x's distance to the nearest integer). Poles, infinities, NaN as the
    reference says: +-inf at x <= 0 integral (torch's signs), +-0 at +inf, NaN at -inf."""
    x = np.concatenate([rnd(7, 37, lo=0.01, hi=40), np.exp(rnd(3, 37, lo=-12, hi=12))]).astype(np.float32)
    got, ref = run_op(device, "polygamma", [x], {"n": n}, x.shape)
    finite = np.isfinite(ref)                  # (past FLT_MAX near 0: inf on both)
    assert np.array_equal(got[~finite], ref[~finite]) and finite.mean() > 0.8
    check(got[finite], ref[finite], ("ulp", 4 + n))
    x = rnd(7, 37, lo=-25, hi=0)
    x = np.where(x == np.round(x), x + 0.25, x).astype(np.float32)
    got, ref = run_op(device, "polygamma", [x], {"n": n}, x.shape)
    d = np.abs(x - np.round(x)).astype(np.float64)
    with np.errstate(over="ignore"):
        largest = math.factorial(n) * (d ** -(n + 1) + 2)
    finite = np.isfinite(ref)
    assert np.array_equal(np.isinf(got), np.isinf(ref)) and np.all(np.sign(got[~finite]) == np.sign(ref[~finite]))
    check(got[finite], ref[finite], ("bound", (6 + n) * EPS * largest[finite]))
    s = np.float32([0.0, -0.0, -3.0, np.inf, -np.inf, np.nan])
    got, ref = run_op(device, "polygamma", [s], {"n": n}, s.shape)
    sign = 1.0 if n % 2 else -1.0
    np.testing.assert_array_equal(got, np.float32([sign * np.inf] * 3 + [sign * 0.0, np.nan, np.nan]))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))


def test_polygamma_reference_as_torch():
    """The float64 reference against torch.polygamma in float64 (n = 1..6; below 0 as well, and
    n = 0 is digamma), and refusing n < 0 or non-integral n with a message."""
    import torch
    x = np.concatenate([rnd(3, 37, lo=0.05, hi=30), rnd(3, 37, lo=-9.9, hi=-0.1)]).astype(np.float64)
    x = x[np.abs(x - np.round(x)) > 1e-3]
    for n in range(0, 7):
        want = torch.polygamma(n, torch.from_numpy(x)).numpy()
        got = fops.polygamma(x.astype(np.float32), n=n)
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=4 * EPS, atol=1e-30)
    with pytest.raises(ValueError, match="polygamma: n = -1"):
        fops.polygamma(x, n=-1)
    with pytest.raises(ValueError, match="n = 1.5"):
        fops.polygamma(x, n=1.5)


@pytest.mark.parametrize("op,attrs,torch_fn", [
    ("clamp", {"min": 0.1, "max": 0.9}, lambda torch, t: t.clamp(0.1, 0.9)),
    ("clamp", {"max": 0.2}, lambda torch, t: t.clamp(max=0.2)),
    ("hardtanh", {}, lambda torch, t: t.clamp(-1, 1)),
    ("relu", {}, lambda torch, t: t.relu()),
    ("hardswish", {}, lambda torch, t: torch.nn.functional.hardswish(t)),
    ("hardsigmoid", {}, lambda torch, t: torch.nn.functional.hardsigmoid(t))])
def test_clamps_keep_nan_as_torch(device, op, attrs, torch_fn):
    """A NaN through a clamp, relu or hard activation stays NaN, as torch's (GLSL's min / max of
    a NaN may give either operand: the clamp gave its bound, a clamp by max alone -inf)."""
    import torch
    x = np.array([np.nan, 0.5, -1.0, 2.0, np.inf, -np.inf, -0.0, 0.05], np.float32)
    got, ref = run_op(device, op, [x], attrs, x.shape)
    want = torch_fn(torch, torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ref, want)


@pytest.mark.parametrize("op,tol", [("atan2", 4), ("hypot", 2), ("pow_tensor", None)])
def test_atan2_hypot_pow_of_two_tensors(device, op, tol):
    """atan2 (atan_f32 of |a| / |b| in the quadrant: every quadrant), hypot (scaled by a power of
    two: no overflow for 1e30, no underflow for 1e-30) and a ** b elementwise, broadcast,
    within the stated ulp of numpy in float64 (pow: exp(b log|a|)'s (3 + 3 |b ln|a||) ulp)."""
    a = (R.choice([-1, 1], (7, 37)) * 10.0 ** R.uniform(-30, 30, (7, 37))).astype(np.float32)
    b = (R.choice([-1, 1], (1, 37)) * 10.0 ** R.uniform(-30, 30, (1, 37))).astype(np.float32)
    if op == "pow_tensor":
        a, b = np.abs(a) ** 0.1, rnd(1, 37, lo=-8, hi=8)
    got, ref = run_op(device, op, [a, b], {}, a.shape)
    if op == "pow_tensor":
        bound = (3 + 3 * np.abs(b * np.log(a.astype(np.float64)))) * np.spacing(np.abs(ref))
        check(got, ref, ("bound", bound))
    else:
        check(got, ref, ("ulp", tol))


@pytest.mark.parametrize("op", ["remainder", "fmod", "floor_divide", "trunc_divide", "atan2", "hypot", "copysign",
                                "pow_tensor"])
def test_binary_special_values_as_torch(device, op):
    """Every pair of NaN, signed zeros, infinities, 1, -1 and numbers: NaN where torch's is, its
    infinities and signs (fmod(-0, 1) = -0, atan2(0, -0) = pi, hypot(inf, NaN) = inf, 1 ** NaN
    = 1, x // 0 = +-inf), the numbers to within the ops' stated accuracy (exactly: the division
    family and copysign)."""
    import torch
    v = np.float32([np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 2.5, -2.5, 0.75, 7.0, -7.0, 1e-30, 1e30])
    a, b = np.meshgrid(v, v, indexing="ij")
    got, _ = run_op(device, op, [a, b], {}, a.shape)
    fn = {"remainder": torch.remainder, "fmod": torch.fmod, "floor_divide": torch.floor_divide,
          "trunc_divide": lambda x, y: torch.div(x, y, rounding_mode="trunc"), "atan2": torch.atan2,
          "hypot": torch.hypot, "copysign": torch.copysign, "pow_tensor": torch.pow}[op]
    want = fn(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    num = ~np.isnan(want)
    np.testing.assert_array_equal(np.isinf(got[num]), np.isinf(want[num]))
    np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))
    rtol = {"remainder": 0, "fmod": 0, "copysign": 0, "floor_divide": 0, "trunc_divide": 0,
            "pow_tensor": 300 * EPS}.get(op, 8 * EPS)
    # (pow: 1e30 ** 0.75's |b ln|a|| = 52 in its bound; 1e-30 / 7 and the like: results below the
    # smallest normal may flush to 0, as Vulkan allows)
    np.testing.assert_allclose(got[num], want[num], rtol=rtol, atol=np.finfo(np.float32).tiny)


def test_grouped_matmul(device):
    """A mixture of experts' grouped matmul: 23 rows sorted over 5 experts of (13 -> 7), one expert
    with no rows, the last 3 rows past the last offset (0, as transformers' fallback leaves them);
    each row by its own expert's weight, to the dot-product bound."""
    x, w = rnd(23, 13), rnd(5, 13, 7)
    offs = np.int32([4, 4, 11, 17, 20])
    prog = single_op_program("grouped_matmul", [("x", spec(x.shape)), ("w", spec(w.shape)), ("o", spec((5,), "int32"))],
                             [("y", spec((23, 7)))], {}, {})
    got, ref = VulkanExecutor(prog, device)(x, w, offs), run_reference(prog, x, w, offs)
    want = np.zeros((23, 7), np.float64)
    for e, (a, b) in enumerate(zip([0, 4, 4, 11, 17], offs)):
        want[a:b] = x[a:b].astype(np.float64) @ w[e]
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[20:], 0)
    check(got, ref, ("dot", 13), scale=np.abs(x) @ np.abs(w).max(0) + 1e-30)


@pytest.mark.parametrize("shape,dim", [((2, 37), 1), ((3, 29, 5), 1), ((7, 2, 3), 0), ((301,), 0)])
def test_logcumsumexp(device, shape, dim):
    """logcumsumexp: the reference is ATen's CPU kernel (its running log-add-exp in double:
    torch's values bit for bit); the device runs the same step in float32, within 4 ulp of it
    (measured: 3 at most over rows of 2000; the running value is the larger operand's, so the
    rounding does not accumulate), on values from -1e30 to 80, infinities and a NaN (which
    stays, as torch's)."""
    import torch
    rng = np.random.default_rng([int(np.prod(shape)), dim])
    x = (rng.standard_normal(shape) * 20).astype(np.float32)
    flat = x.reshape(-1)
    flat[7::17], flat[3::23], flat[11::29] = -np.inf, 80.0, -1e30
    flat[len(flat) - 2] = np.nan
    got, ref = run_op(device, "logcumsumexp", [x], {"dim": dim}, shape)
    np.testing.assert_array_equal(ref, torch.logcumsumexp(torch.from_numpy(x), dim).numpy())
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_array_equal(np.isinf(got[ok]), np.isinf(ref[ok]))
    bound = 4 * np.spacing(np.abs(ref[ok]).astype(np.float32))
    assert (np.abs(got[ok] - ref[ok]) <= np.maximum(bound, 1e-6)).all()


@pytest.mark.parametrize("owner", ["lane", "subgroup", "workgroup"])
def test_sums_scans_and_max_pools_of_infinities_and_nans_as_torch(device, monkeypatch, owner):
    """A row holding +inf sums to inf, +inf and -inf to NaN, a NaN to NaN, as torch's: the
    compensated sums (before the canonical one) made NaN of any inf (its compensation inf - inf), the float max pool
    dropped a NaN (GLSL's max), SwiftShader's log-softmax of a row holding +inf was -inf (its
    log(NaN) a number). Sums over contiguous runs (vec4 loads) and value by value, a lane, a
    subgroup or a workgroup a row; the running sum; max pools with padding; (log-)softmax."""
    import torch
    import torch.nn.functional as F
    from vkq.ops.pool import max_pool2d_params
    monkeypatch.setattr(fops, "ROW_SUBGROUP", owner == "subgroup")
    n = 8 if owner == "lane" else 3 * fops.REDUCE_ROW + 5
    x = rnd(6, 2, n)
    x[0, :, 3] = np.inf                                  # row 0: +inf (both)
    x[1, 0, 1], x[1, 0, n - 2] = np.inf, -np.inf         # row 1: +inf and -inf
    x[2, 1, n // 2] = np.nan
    x[3, 0, n - 1] = -np.inf
    for dims in ([-1], [1, 2]):
        for op in ("sum", "mean"):
            want = getattr(torch, op)(torch.from_numpy(x), dims).numpy()
            got, ref = run_op(device, op, [x], {"dims": dims, "keepdim": False}, want.shape)
            for a in (got, ref):
                np.testing.assert_array_equal(np.isnan(a), np.isnan(want))
                np.testing.assert_array_equal(a[np.isinf(want)], want[np.isinf(want)])
                np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5 * n)
    for op in ("softmax", "log_softmax"):
        want = getattr(torch, op)(torch.from_numpy(x), -1).numpy()
        got, ref = run_op(device, op, [x], {"dim": -1}, x.shape)
        for a in (got, ref):
            np.testing.assert_array_equal(np.isnan(a), np.isnan(want))
            np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)
    if owner == "lane":
        want = torch.cumsum(torch.from_numpy(x), -1).numpy()
        got, ref = run_op(device, "cumsum", [x], {"dim": -1, "dtype": "float32"}, x.shape)
        for a in (got, ref):
            np.testing.assert_array_equal(np.isnan(a), np.isnan(want))
            np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5)
        img = rnd(2, 3, 7, 9)
        img[0, 0, 2, 3], img[1, 2, 6, 8], img[0, 1, 0, 0] = np.nan, np.nan, -np.inf
        for k, s, p in ((3, 2, 1), (2, 2, 0), (3, 1, 1)):
            want = F.max_pool2d(torch.from_numpy(img), k, s, p).numpy()
            got, ref = run_op(device, "max_pool2d", [img], max_pool2d_params(k, s, p), want.shape)
            assert np.isnan(want).sum() >= 1
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(ref, want)
