"""Bit-exact float ops (issue 59; shaders/include/float_exact.glsl's rules): the device gives
the numpy reference's bits exactly, on every driver, texel and ssbo loads, a lane, a subgroup
or a workgroup a row, at any subgroup size (run this file under LP_NATIVE_VECTOR_WIDTH=128,
256, 512 for lavapipe's 4, 8, 16 lanes). The references are float32 step sequences
(vkq/ops/float_math.py silu_f32, vkq/ops/float_norm.py rms_norm, vkq/ops/float.py sum_), themselves checked against torch here."""
import math
import warnings

import numpy as np
import pytest

from test_float_ops import lane_rows, rows, run_op   # noqa: F401  (lane_rows, rows: fixtures)
from vkq.ops import float_math as fm
from vkq.registry import get_op

EPS = float(np.finfo(np.float32).eps)
TINY = float(np.finfo(np.float32).tiny)


def assert_same_bits(got, ref):
    """Equal bits (a zero's sign included); NaN where the reference is NaN, any payload."""
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got.view(np.uint32)[~nan], ref.view(np.uint32)[~nan])


def special_values(rng, n):
    x = rng.standard_normal(n).astype(np.float32) * 4
    spec = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1.4e-45, TINY, -TINY, 3e-38, 2e-37,
                     1e-30, -1e-30, 1e30, -1e30, 3e38, -3e38, 87.0, -87.0, -87.01, 88.8, 104.0, -104.0, 0.5, -0.5,
                     20.0, -20.0], np.float32)
    x[rng.choice(n, spec.size, replace=False)] = spec
    return x


def test_silu_is_exact(loads_device):
    rng = np.random.default_rng(59)
    x = special_values(rng, 1031)
    got, ref = run_op(loads_device, "silu", [x], {}, x.shape)
    assert_same_bits(got, ref)
    assert_same_bits(ref, fm.silu_f32(x))
    # what it gives: -0 for -inf and below -87, x's signed zero for zeros and subnormals
    assert_same_bits(fm.silu_f32(np.array([-np.inf, -100.0, -0.0, 1e-40, -1e-40, np.inf, np.nan], np.float32)),
                     np.array([-0.0, -0.0, -0.0, 0.0, -0.0, np.inf, np.nan], np.float32))
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.nn.functional.silu(torch.from_numpy(x)).numpy()
    ok = np.isfinite(x) & ((x >= -87) | (x < -1e30)) & (np.abs(x) >= 2.0 ** -124)
    np.testing.assert_allclose(ref[ok], want[ok], rtol=6 * EPS, atol=0)   # (3 ulp from float64)
    assert (ref[ok] != want[ok]).any() and (x[ok] < -80).any() and (x[ok] > 80).any()


def rms_input(rng, rows, d):
    x = (rng.standard_normal((rows, d)) * 2 + 0.3).astype(np.float32)
    if rows >= 4 and d >= 40:
        x[1] = special_values(rng, d)           # NaN and inf: a NaN row
        x[1][np.isnan(x[1]) | np.isinf(x[1]) | (np.abs(x[1]) > 1e20)] = 7.0
        x[1, ::3] *= 1e-38                       # tiny and subnormal values among normal ones
        x[2, :] = (rng.standard_normal(d) * 1e-20).astype(np.float32)    # squares subnormal
        x[2, :5] = [0.0, -0.0, 1e-40, -1e-40, 1e-19]
        x[3, d // 2] = np.nan
    return x


@pytest.mark.parametrize("rows,d", [(1, 576), (5, 576), (4, 577), (7, 5), (4, 1024), (4, 3000), (6, 40), (3, 17)])
def test_rms_norm_is_exact(loads_device, lane_rows, rows, d):
    device, steps = loads_device, []
    rng = np.random.default_rng(rows * 7919 + d)
    x = rms_input(rng, rows, d)
    w = (rng.standard_normal(d) * 0.5 + 1).astype(np.float32)
    w[: min(3, d)] = [0.0, -1.0, 1e-40][: min(3, d)]
    got, ref = run_op(device, "rms_norm", [x], {"normalized_shape": [d], "eps": 1e-5}, x.shape, constants=[w],
                      steps=steps)
    assert_same_bits(got, ref)
    (st,) = steps
    assert st.spec[2:4] == (d % 4 == 0, 0)                   # VEC, CENTER off
    variant = next(v for v in st.defines if v.startswith("ROW_"))
    lanes = {"ROW_LANE": 1, "ROW_SUBGROUP": device.info.subgroup_size, "ROW_WORKGROUP": st.spec[0]}[variant]
    assert st.spec[4:] == (min(lanes, 16), 16 // min(lanes, 16))    # PART_LANES, PART_T
    if lane_rows == "workgroup":
        assert variant == "ROW_WORKGROUP"
    import torch
    want = torch.nn.functional.rms_norm(torch.from_numpy(x), [d], torch.from_numpy(w), 1e-5).numpy()
    normal = np.abs(want) >= 1e-30
    np.testing.assert_allclose(ref[normal], want[normal], rtol=8 * EPS, atol=0)
    assert np.array_equal(np.isnan(ref), np.isnan(want))
    if rows >= 4 and d >= 40:
        assert np.isnan(ref[3]).all() and (ref[2] != 0).sum() > d // 2


@pytest.mark.parametrize("rows,d", [(5, 384), (4, 577), (7, 5), (3, 2056), (6, 40), (2, 1)])
def test_layer_norm_is_exact(loads_device, lane_rows, rows, d):
    """layer_norm: canonical sums (the mean, then the squared deviations), rsqrt_newton, ftz:
    the reference's bits on every path; the reference within a few ulp of float64's."""
    device, steps = loads_device, []
    rng = np.random.default_rng(rows * 131 + d)
    x = rms_input(rng, rows, d) * np.float32(3) + np.float32(40)     # an offset: the mean matters
    if rows >= 4 and d >= 40:
        x[2] = (rng.standard_normal(d) * 1e-37).astype(np.float32)   # deviations subnormal
    w = (rng.standard_normal(d) * 0.5 + 1).astype(np.float32)
    b = rng.standard_normal(d).astype(np.float32)
    w[: min(3, d)] = [0.0, -1.0, 1e-40][: min(3, d)]
    got, ref = run_op(device, "layer_norm", [x], {"normalized_shape": [d], "eps": 1e-5}, x.shape,
                      constants=[w, b], steps=steps)
    assert_same_bits(got, ref)
    (st,) = steps
    assert st.spec[2:4] == (d % 4 == 0, 1)                   # VEC, CENTER
    variant = next(v for v in st.defines if v.startswith("ROW_"))
    lanes = {"ROW_LANE": 1, "ROW_SUBGROUP": device.info.subgroup_size, "ROW_WORKGROUP": st.spec[0]}[variant]
    assert st.spec[4:] == (min(lanes, 16), 16 // min(lanes, 16))    # PART_LANES, PART_T
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * w + b
    ok = np.isfinite(want).all(1)                            # (row 3 holds a NaN: NaN both)
    assert np.array_equal(np.isnan(ref).any(1), ~ok)
    np.testing.assert_allclose(ref[ok], want[ok], rtol=0, atol=64 * EPS * np.abs(want[ok]).max())


@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 7), 3), ((3, 4, 11), 1), ((3, 16), 2), ((1, 8, 3, 3), 8)])
def test_group_norm_is_exact(loads_device, lane_rows, shape, groups):
    device = loads_device
    rng = np.random.default_rng(sum(shape) + groups)
    x = (rng.standard_normal(shape) * 3 + 0.5).astype(np.float32)
    x.reshape(-1)[::7] = 0.0
    w, b = rng.standard_normal(shape[1]).astype(np.float32), rng.standard_normal(shape[1]).astype(np.float32)
    got, ref = run_op(device, "group_norm", [x], {"groups": groups, "eps": 1e-5}, shape, constants=[w, b])
    assert_same_bits(got, ref)
    import torch
    want = torch.nn.functional.group_norm(torch.from_numpy(x).double(), groups, torch.from_numpy(w).double(),
                                          torch.from_numpy(b).double(), 1e-5).numpy()
    np.testing.assert_allclose(ref, want, rtol=0, atol=32 * EPS * np.abs(want).max())


def test_sum_canonical_signed():
    """The signed canonical sum: ftz after each add (a partial that passes through a subnormal
    is 0, as on a device that flushes), +0 for a row of -0s, and not numpy's own order."""
    x = np.zeros((3, 130), np.float32)
    x[0, 0], x[0, 64] = np.float32(2e-38), np.float32(-1.5e-38)     # partial 0: 5e-39, subnormal: 0
    x[1, :] = -0.0
    x[2] = np.random.default_rng(1).standard_normal(130).astype(np.float32)
    s = fm.sum_canonical(x)
    assert s[0] == 0 and s[1] == 0 and not np.signbit(s[1])
    assert abs(s[2] - x[2].astype(np.float64).sum()) <= 130 * EPS * np.abs(x[2]).sum()


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,dim", [((7, 49), -1), ((3, 5, 51), -1), ((5, 52), -1), ((3, 300), -1),
                                       ((4, 5, 6), 1), ((2, 131), -1), ((3, 1001), -1), ((6, 3), -1)])
def test_softmax_is_exact(loads_device, lane_rows, op, shape, dim):
    """softmax / log_softmax: the max, the canonical sum of exp_f32 (row_stats), recip_newton or
    log_f32: the reference's bits on every path (VEC 0, 1, 3 and row groups among these shapes);
    the reference within (4 + |x - m|) ulp (+ 1e-44) of float64's softmax."""
    device = loads_device
    rng = np.random.default_rng(sum(shape) + len(op))
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    x.reshape(-1)[::11] = -1e30                    # exp(x - m) 0 (below -87.3)
    x.reshape(-1)[5::13] = 1e-40                   # subnormal inputs
    got, ref = run_op(device, op, [x], {"dim": dim}, shape)
    assert_same_bits(got, ref)
    x64 = np.moveaxis(x.astype(np.float64), dim, -1)
    z = x64 - x64.max(-1, keepdims=True)
    want = z - np.log(np.exp(z).sum(-1, keepdims=True)) if op == "log_softmax" else \
        np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    want = np.moveaxis(want, -1, dim)
    # (x - m rounds to float32 first: its error |x - m| eps/2 passes into exp relative, as in torch)
    zz = np.moveaxis(np.abs(z), -1, dim)
    if op == "softmax":
        assert np.all(np.abs(ref - want) <= (4 + zz) * EPS * want + 1e-44)
    else:
        fine = want > -1e20
        assert np.all(np.abs(ref - want)[fine] <= 4 * EPS * (np.abs(want) + 1)[fine])


def test_softmax_masked_is_exact(loads_device, lane_rows):
    device = loads_device
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 3, 5, 11)) * 9).astype(np.float32)
    m = np.where(rng.random((2, 1, 1, 11)) < 0.3, -np.inf, 0).astype(np.float32)
    m[..., 0] = 0
    got, ref = run_op(device, "softmax_masked", [x, m], {"scale": 0.37}, x.shape)
    assert_same_bits(got, ref)


def test_log_f32_twin():
    """float_math.log_f32 (the shaders' log, bit for bit on the device through log_softmax):
    within 2 ulp of float64's log on normal and subnormal inputs, its special values."""
    x = np.concatenate([np.random.default_rng(2).uniform(0, 50, 20000), [1e-40, 1e-45, 1.0, 2.0, 0.5, 3e38]])
    x = x.astype(np.float32)
    got = fm.log_f32(x).astype(np.float64)
    want = np.log(x.astype(np.float64))
    assert np.all(np.abs(got - want) <= 2 * EPS * np.maximum(np.abs(want), 1e-30) + 1e-45)
    assert_same_bits(fm.log_f32(np.array([0.0, -1.0, np.inf, np.nan], np.float32)),
                     np.array([-np.inf, np.nan, np.inf, np.nan], np.float32))


def _ulp_bound(n):
    return lambda want, t: n * np.spacing(np.abs(want).astype(np.float32)).astype(np.float64) + 1e-44


def _softplus64(x, beta, threshold):
    b = np.float64(np.float32(beta))
    bx = (x.astype(np.float32) * np.float32(beta)).astype(np.float64)      # (beta x rounded, as torch's)
    return np.where(bx > threshold, x, np.log1p(np.exp(np.minimum(bx, 700))) / b)


# op, attrs, float64 function, bound(want, x) on the reference's error (the twin's, measured
# on 4M-value sweeps: vkq/ops/float.py's accuracy table)
EXACT_UNARY = [
    ("sigmoid", {}, lambda t: 1 / (1 + np.exp(-t)), lambda w, t: 4 * EPS * np.abs(w) + 1e-44),
    ("tanh", {}, np.tanh, lambda w, t: 2.5e-7 + 0 * w),
    ("exp", {}, np.exp, lambda w, t: 3 * EPS * np.abs(w) + 1e-44),
    ("erf", {}, np.vectorize(__import__("math").erf), lambda w, t: 4.5e-7 + 0 * w),
    ("log", {}, np.log, _ulp_bound(1)),
    ("log2", {}, np.log2, _ulp_bound(2)),
    ("log10", {}, np.log10, _ulp_bound(2)),
    ("log1p", {}, np.log1p, _ulp_bound(1)),
    ("expm1", {}, np.expm1, _ulp_bound(3.5)),
    ("exp2", {}, np.exp2, _ulp_bound(1)),
    ("softplus", {"beta": 1.0, "threshold": 20.0}, lambda t: _softplus64(t, 1.0, 20.0), _ulp_bound(2)),
    ("softplus", {"beta": 2.0, "threshold": 5.0}, lambda t: _softplus64(t, 2.0, 5.0), _ulp_bound(2)),
    ("mish", {}, lambda t: t * np.tanh(_softplus64(t, 1.0, 20.0)), lambda w, t: 3e-7 + 2 * EPS * np.abs(w)),
    ("elu", {"alpha": 1.3}, lambda t: np.where(t > 0, t, np.float64(np.float32(1.3)) * np.expm1(t)),
     lambda w, t: 1.2e-7 + 2 * EPS * np.abs(w)),
    ("sqrt", {}, np.sqrt, lambda w, t: 0.5 * np.spacing(np.abs(w).astype(np.float32)).astype(np.float64)),
    ("rsqrt", {}, lambda t: 1 / np.sqrt(t), _ulp_bound(1.25)),
    ("hardswish", {}, lambda t: t * np.clip(t + 3, 0, 6) / 6, _ulp_bound(2)),     # (torch's two roundings: its bits)
    ("hardsigmoid", {}, lambda t: np.clip(t + 3, 0, 6) / 6, _ulp_bound(1)),
    *[("pow", {"exponent": e}, (lambda e: lambda t: np.power(t, np.float64(np.float32(e))))(e),
       (lambda e: lambda w, t: 2 * (1 + np.abs(np.float32(e) * np.log(np.abs(t)))) * np.spacing(
           np.minimum(np.abs(w), 3e38).astype(np.float32)).astype(np.float64) + 1e-44)(e))
      for e in (0.75, -1.5, 4.0, -5.0, 2.5, 0.5, 1 / 3)],
]


@pytest.mark.parametrize("op,attrs,fn,bound", EXACT_UNARY, ids=[f"{c[0]}{i}" for i, c in enumerate(EXACT_UNARY)])
def test_unary_is_exact(loads_device, op, attrs, fn, bound):
    """float_math.glsl's sequences (no division: recip_newton; precise; products flushed; subnormals
    by their bits) give their twins' bits, special values included (zeros, subnormals, inf, NaN,
    huge and tiny, negatives); the twins are within their stated bounds of float64."""
    rng = np.random.default_rng(len(op) + len(attrs))
    x = special_values(rng, 8001)
    x[:2000] = rng.uniform(-12, 12, 2000).astype(np.float32)
    x[2000:2100] = rng.uniform(-0.07, 0.07, 100).astype(np.float32)      # tanh's series
    x[2100:3100] = np.exp(rng.uniform(-103, 88.7, 1000)).astype(np.float32)      # logs: all of float32
    x[3100:3600] = (1 + rng.uniform(-1e-3, 1e-3, 500)).astype(np.float32)        # near 1
    x[3600:3700] = rng.uniform(-1e-4, 1e-4, 100).astype(np.float32)              # log1p / expm1 ~ x
    x[3700:3800] = (rng.uniform(0, 2 ** 23, 100).astype(np.int32).view(np.float32)
                    * np.where(rng.random(100) < 0.5, -1, 1).astype(np.float32))  # subnormals
    x[3800:4300] = rng.uniform(-130, 130, 500).astype(np.float32)                # exp2, expm1's ranges
    x[4300:4800] = -np.exp(rng.uniform(-30, 30, 500)).astype(np.float32)          # pow of negatives
    x[4800:4900] = np.round(rng.uniform(-140, 140, 100)).astype(np.float32)      # integers
    x[4900:5000] = np.ldexp(np.float32(1), rng.integers(-149, 128, 100)).astype(np.float32)    # powers of two
    if loads_device.texel_loads:
        x = x[:8000]
    got, ref = run_op(loads_device, op, [x], attrs, x.shape)
    assert_same_bits(got, ref)
    v = x[np.isfinite(x) & (np.abs(x) < 30) & (np.abs(x) > 1e-30)].astype(np.float64)
    if op in ("log", "log2", "log10", "log1p", "pow", "sqrt", "rsqrt"):
        v = x[np.isfinite(x) & (np.abs(x) > 1e-37)].astype(np.float64)
    with np.errstate(all="ignore"):
        want = fn(v)
    r = get_op(op).reference(v.astype(np.float32), **attrs).astype(np.float64)
    ok = np.isfinite(want) & (np.abs(want) < 3e38) & ((np.abs(want) > 1.2e-38) | (want == 0))
    assert np.array_equal(np.isnan(r), np.isnan(want))
    err, b = np.abs(r - want)[ok], bound(want, v)[ok]
    assert np.all(err <= b), (np.max(err / b), v[ok][np.argmax(err / b)])


def test_sqrt_and_div6_are_correctly_rounded():
    """sqrt_f32's steps (rsqrt_newton, Dekker's residual, one correction) give np.sqrt's bits, and
    div6_core's (a fl(1/6), the remainder exact, one correction) numpy's a / 6: two whole binades
    (every mantissa: both repeat by binade) and a million values over every exponent, subnormals
    and the scaled ranges included; rsqrt_f32 within 1.25 ulp."""
    rng = np.random.default_rng(6)
    binades = (np.int32(127 << 23) + np.arange(1 << 24, dtype=np.int32)).view(np.float32)     # [1, 4)
    spread = rng.integers(1, 0x7F800000, 1 << 20, dtype=np.int64).astype(np.int32).view(np.float32)
    for x in (binades, spread):
        assert_same_bits(fm.sqrt_f32(x), np.sqrt(x))
        core = (np.abs(x) >= 2.0 ** -60) & (np.abs(x) <= 2.0 ** 100)
        assert_same_bits(fm.div6_steps(x[core]), x[core] / np.float32(6))
        assert_same_bits(fm.div6_f32(x[core]), x[core] / np.float32(6))
    want = 1 / np.sqrt(spread.astype(np.float64))
    assert (np.abs(fm.rsqrt_f32(spread) - want) / np.spacing(want.astype(np.float32))).max() <= 1.25
    assert_same_bits(fm.sqrt_f32(np.float32([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan])),
                     np.float32([0.0, -0.0, np.nan, np.inf, np.nan, np.nan]))
    assert_same_bits(fm.rsqrt_f32(np.float32([0.0, -0.0, -1.0, np.inf, np.nan])),
                     np.float32([np.inf, -np.inf, np.nan, 0.0, np.nan]))


@pytest.mark.parametrize("name", ["erf_f32", "exp_f32", "ftz", "recip_newton", "silu_f32", "rsqrt_newton", "sqrt_f32",
                                  "rsqrt_f32", "div6_f32", "log_f32", "log2_f32", "log10_f32", "log1p_f32",
                                  "expm1_f32", "exp2_f32", "mish_f32", "tanh_f32", "sigmoid_f32"])
def test_twins_take_0d_inputs(name):
    """A full reduction gives a 0-d array (var and std's sqrt of a whole tensor): a twin on it, or
    on a numpy scalar, gives the bits it gives on the same values in an array, as a 0-d result
    (numpy 1.x turns a 0-d int32's `b >> 1` into int64, whose float32 view fails: the CI failure
    of var/std)."""
    xs = np.float32([0.375, -2.5, 1e-40, 0.0, -0.0, np.inf, 3e38, 7.0, 88.0, -90.0])
    fn = getattr(fm, name)
    with np.errstate(all="ignore"):
        want = fn(xs)
        for x, w in zip(xs, want):
            for arg in (np.array(x), x):
                got = fn(arg)
                assert np.shape(got) == ()
                assert_same_bits(np.atleast_1d(got), np.atleast_1d(w))
        assert_same_bits(np.atleast_1d(fm.div_f32(np.array(xs[0]), np.float32(3))), fm.div_f32(xs[:1], np.float32(3)))
        assert fm.div_f32(xs, np.float32(3)).shape == xs.shape
        assert np.shape(fm.pow_f32(np.array(xs[1]), np.float32(2))) == ()


def test_sum_squares_canonical_order():
    """The canonical sum is a float32 sum close to the float64 one, and it is an order of its
    own (not numpy's): it differs from a sequential float32 sum somewhere."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 3001)).astype(np.float32)
    s = fm.sum_squares_canonical(x)
    want = (x.astype(np.float64) ** 2).sum(1)
    assert np.abs(s - want).max() <= 3001 * EPS * want.max()
    seq = np.zeros(64, np.float32)
    for j in range(x.shape[1]):
        seq = seq + x[:, j] * x[:, j]
    assert (seq != s).any()
    # partial j % 64, then the fixed tree: a row of ones sums exactly, and order shows on 2^24 + 1s
    assert fm.sum_squares_canonical(np.ones((1, 577), np.float32))[0] == 577
    y = np.ones((1, 65), np.float32)
    y[0, 0] = 4096.0            # 2^24: partial 0 loses value 64's 1; the other 63 ones are summed first
    assert fm.sum_squares_canonical(y)[0] == 2.0 ** 24 + 62    # (a sequential sum: 2^24)


def test_recip_newton_is_within_1_21_ulp():
    """On [1, 2^100] (silu takes s past 2^64 down by 2^-64 first); 1 and 1/2 exact."""
    rng = np.random.default_rng(9)
    s = np.concatenate([np.exp2(rng.uniform(0, 100, 200_000)), [1.0, 2.0, 3.0, 1.5]]).astype(np.float32)
    got = fm.recip_newton(s).astype(np.float64)
    want = 1 / s.astype(np.float64)
    assert (np.abs(got - want) / np.spacing(want.astype(np.float32))).max() <= 1.21
    assert fm.recip_newton(np.float32(1.0)) == 1.0 and fm.recip_newton(np.float32(2.0)) == 0.5


def div_operands(rng, n):
    """Dividends and divisors for div: random bit patterns (every exponent, subnormals, infs,
    NaNs), ratios next to 1, quotients that overflow and that underflow, subnormal operands, and
    every pair of the special values."""
    bits = lambda k: rng.integers(0, 2 ** 32, k, dtype=np.uint64).astype(np.uint32).view(np.float32)
    k = n // 6
    x, y = bits(n), bits(n)
    x[k:2 * k] = rng.uniform(1, 2, k)
    y[k:2 * k] = (x[k:2 * k].view(np.uint32) + rng.integers(-8, 9, k).astype(np.uint32)).view(np.float32)
    x[2 * k:3 * k] = rng.uniform(-2, 2, k) * np.exp2(rng.integers(100, 128, k))      # x / y near FLT_MAX and past
    y[2 * k:3 * k] = rng.uniform(-2, 2, k) * np.exp2(rng.integers(-126, -100, k))
    x[3 * k:4 * k] = rng.uniform(-2, 2, k) * np.exp2(rng.integers(-126, -100, k))    # near 2^-126 and below
    y[3 * k:4 * k] = rng.uniform(-2, 2, k) * np.exp2(rng.integers(0, 27, k))
    x[4 * k:5 * k] = rng.integers(1, 2 ** 23, k).astype(np.uint32).view(np.float32)   # subnormal / anything
    y[5 * k:6 * k] = rng.integers(1, 2 ** 23, k).astype(np.uint32).view(np.float32)   # anything / subnormal
    spec = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.0, 1e-40, -1.4e-45, TINY, 3e38, -3e38,
                     1e-30], np.float32)
    sx, sy = np.meshgrid(spec, spec)
    x[-sx.size:], y[-sx.size:] = sx.ravel(), sy.ravel()
    return x, y


def test_div_f32_twin():
    """float_math.div_f32 (float_binary's div, bit for bit on the device) against IEEE's
    division (np.divide, float32): equal bits wherever that is a normal number, inf, zero or NaN
    (NaN as NaN); a quotient below 2^-126 is a zero of its sign (subnormals flushed, as issue
    59's rule 4), and there only."""
    rng = np.random.default_rng(59)
    x, y = div_operands(rng, 600_000)
    B = rng.integers(2 ** 23, 2 ** 24, 100_000)                      # quotients next to midpoints:
    A = (B * (2 * rng.integers(2 ** 23, 2 ** 24, B.size) + 1) + 2 ** 24) >> 25   # (2K + 1) / 2^25 in [1/2, 1)
    keep = (A >= 2 ** 23) & (A < 2 ** 24)
    x = np.concatenate([x, A[keep].astype(np.float32), (A[keep] + 1).astype(np.float32)])
    y = np.concatenate([y, B[keep].astype(np.float32), B[keep].astype(np.float32)])
    with np.errstate(all="ignore"):
        want = np.divide(x, y)
        exact = x.astype(np.float64) / y.astype(np.float64)
    got = fm.div_f32(x, y)
    tiny = np.abs(exact) < TINY
    assert_same_bits(got[~tiny], want[~tiny])
    assert np.all(got[tiny] == 0) and np.array_equal(np.signbit(got[tiny]), np.signbit(want[tiny]))
    assert tiny.sum() > 10_000 and (want[tiny] != 0).sum() > 1000 and (np.abs(want[~tiny]) > 3e38).any()
    assert_same_bits(fm.div_f32(np.float32([1, -1, 0, 0, np.inf, np.inf, -np.inf, 1, 6, 1e-45, 1e-40, 3e38, np.nan]),
                                np.float32([0, 0, 0, -1, 2, np.inf, -0.0, -np.inf, 3, 1e-45, 1e20, 1e-38, 1])),
                     np.float32([np.inf, -np.inf, np.nan, -0.0, np.inf, np.nan, np.inf, -0.0, 2, 1, 0, np.inf, np.nan]))


@pytest.mark.parametrize("a_shape,b_shape,path", [((3001,), (3001,), "CONTIG"), ((3000,), (3000,), "CONTIG"),
                                                  ((4, 3, 5, 11), (1, 3, 5, 11), "FLAT"),
                                                  ((4, 3, 4, 9), (1, 3, 4, 9), "FLAT"),   # (whole texels)
                                                  ((2, 3, 5, 11), (2, 3, 5, 1), "FLAT"),
                                                  ((2, 3, 5, 3), (1, 1, 1, 3), "ROWS"), ((3, 1, 7), (5, 7), "ROWS"),
                                                  ((4, 3, 1), (4, 3, 6), None)])
def test_div_is_exact(loads_device, a_shape, b_shape, path):
    """div: float_math.glsl's div_f32 (no division instruction) gives its twin's bits on every
    path (CONTIG, FLAT, ROWS, the general one; ssbo and texel loads), broadcast or not, with
    special, subnormal, overflowing and underflowing operands; and with a scalar either side."""
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    shape = np.broadcast_shapes(a_shape, b_shape)
    x, y = div_operands(rng, int(np.prod(shape)) + 300)
    a, b = x[:np.prod(a_shape)].reshape(a_shape), y[-np.prod(b_shape):].reshape(b_shape)
    steps = []
    got, ref = run_op(loads_device, "div", [a, b], {}, shape, steps=steps)
    assert_same_bits(got, ref)
    assert_same_bits(ref, fm.div_f32(a, b))
    d = steps[0].defines
    assert "OP_DIV" in d and all((k in d) == (k == path) for k in ("CONTIG", "FLAT", "ROWS")), d
    whole = a.size % 4 == 0 and b.size % 4 == 0
    assert ("TEXEL" in d) == (path in ("CONTIG", "FLAT") and loads_device.texel_loads and whole), d
    if len(a_shape) == 1:
        for s, first in [(7.0, False), (1e-40, False), (3e-38, True), (-0.0, True), (1.0, True)]:
            got, ref = run_op(loads_device, "div", [a], {"scalar": s, "scalar_first": first}, a_shape)
            assert_same_bits(got, ref)
            assert_same_bits(ref, fm.div_f32(np.float32(s), a) if first else fm.div_f32(a, np.float32(s)))


def canonical_sum_by_definition(v):
    """float_exact.glsl's canonical sum of one output's values v (its logical order), written
    from its definition, value by value (the twin, sum_canonical, is vectorised): partial j % 64
    from +0, zeros past the values up to whole rounds of 64 added too, ftz after each add; the
    partials 4q .. 4q + 3 into S_q = (p0 + p1) + (p2 + p3); the halving tree over the 16 S_q."""
    f = np.float32
    ftz = lambda a: fm.ftz(np.float32(a))[()]                          # noqa: E731
    n = max(1, -(-len(v) // 64)) * 64
    parts = [f(0)] * 64
    for j in range(n):
        parts[j % 64] = ftz(parts[j % 64] + (v[j] if j < len(v) else f(0)))
    s = [ftz(ftz(parts[4 * q] + parts[4 * q + 1]) + ftz(parts[4 * q + 2] + parts[4 * q + 3])) for q in range(16)]
    while len(s) > 1:
        h = len(s) // 2
        s = [ftz(s[t] + s[t + h]) for t in range(h)]
    return s[0]


def zeros_of_both_signs(rng, n):
    """Values whose partial sums are subnormal (flushed: zeros of either sign) or tiny."""
    return rng.choice(np.array([1.2e-38, -1.2e-38, 2.3e-38, -2.3e-38, 2.9e-38, -3e-38, 0.0, -0.0, 1e-40, -1e-40],
                               np.float32), n)


def reduce_input(rng, shape, dims, op):
    """x of `shape`, its outputs' rows (logical order) planted: NaN, +inf, +inf and -inf, tiny
    values (zeros of both signs), squares that are subnormal or overflow (the norm)."""
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    red = sorted({d % len(shape) for d in dims}) if dims else list(range(len(shape)))
    keep = [d for d in range(len(shape)) if d not in red]
    order = keep + red
    rows = np.ascontiguousarray(np.transpose(x, order)).reshape(-1, math.prod(shape[d] for d in red))
    n_out, count = rows.shape
    for r in range(n_out):
        kind = r % 8
        if kind == 1 and count >= 63:           # a sum of -0: every S_q -0 (the tree keeps it)
            rows[r] = 0.0
            rows[r, :min(count, 64)] = np.resize(np.array([-3e-38, 2.9e-38], np.float32), min(count, 64))
            if count == 63:                      # (S_15 = ftz(ftz(a + b) + ftz(c + 0)))
                rows[r, 60:] = [3e-38, -1.5e-38, -1.6e-38]
        elif kind in (1, 7):
            rows[r] = zeros_of_both_signs(rng, count)
        elif kind == 2 and count > 2:
            rows[r, rng.integers(count)] = np.nan
        elif kind == 3:
            rows[r, rng.integers(count)] = np.inf
        elif kind == 4 and count > 1:
            rows[r, :2] = [np.inf, -np.inf]
        elif kind == 5:
            rows[r] = rows[r] * np.float32(1e-20 if op == "vector_norm" else 1e-37)   # subnormal squares / sums
        elif kind == 6 and op == "vector_norm":
            rows[r, 0] = 3e20                                                        # its square: inf
    x = np.transpose(rows.reshape([shape[d] for d in order]), np.argsort(order))
    return np.ascontiguousarray(x), rows


REDUCE_EXACT = [((7, 5), [1], False), ((6, 63), [-1], False), ((5, 64), [-1], True), ((4, 3, 100), [2], False),
                ((3, 4097), [1], False), ((300, 7), [0], False), ((5, 6, 7), [0, 2], True),
                ((2, 3, 17, 24), [1, 2, 3], False), ((9, 13), None, False), ((4, 12), [1], True),
                ((2, 70, 3), [1], True), ((3, 5, 32), [0, 2], False), ((2, 3, 4, 5, 6), [0, 2, 4], False),
                ((64, 2), [1], False), ((20001,), None, False), ((8, 128), [1], False)]


@pytest.mark.parametrize("op", ["sum", "mean", "vector_norm"])
@pytest.mark.parametrize("shape,dims,keepdim", REDUCE_EXACT, ids=[f"{c[0]}-{c[1]}" for c in REDUCE_EXACT])
def test_sum_mean_norm_are_exact(loads_device, rows, op, shape, dims, keepdim):
    """sum, mean, vector_norm (float_reduce.comp): each output's values in the canonical order
    (float_math.sum_canonical of ftz(x) / ftz(x^2)), mean ftz(S * float32(1/count)), the norm
    sqrt_f32: the reference's bits on every path (an invocation an output below 64 values, a
    subgroup at 4 / 8 / 16 lanes or a workgroup from 64, vec4 / texel loads of a contiguous run,
    value by value over strided and several dims), NaN, inf and zeros of both signs included.
    The reference within its stated bounds of float64's."""
    rng = np.random.default_rng(sum(shape) * 31 + len(op) + len(dims or ()))
    x, xr = reduce_input(rng, shape, dims, op)
    attrs = {"dims": dims, "keepdim": keepdim}
    ref = get_op(op).reference(x, **attrs)
    steps = []
    got, ref2 = run_op(loads_device, op, [x], attrs, ref.shape, steps=steps)
    assert_same_bits(got, ref)
    assert_same_bits(ref2, ref)
    (st,) = steps
    count = xr.shape[1]
    owner = next((d for d in st.defines if d.startswith("ROW_")), None)
    assert (owner is None) == (count < 64), st.defines
    if owner is not None and rows == "workgroup":
        assert owner == "ROW_WORKGROUP"
    # the reference within its bounds of float64's: (k + 6) eps/2 sum |x| for k = ceil(count / 64)
    # adds a partial and the tree's 6, plus what ftz drops (< 2^-126 an add); mean + 1.5 ulp of
    # S / count; the norm: half the relative error of S, + 0.75 ulp
    with np.errstate(invalid="ignore", over="ignore"):      # (float64 sums of inf and NaN rows)
        r = ref.reshape(-1).astype(np.float64)
        x64 = xr.astype(np.float64)
        fine = np.isfinite(x64).all(1) & (np.abs(x64).max(1) < 1e19)
        k = -(-count // 64)
        if op == "vector_norm":
            want = np.sqrt((x64 ** 2).sum(1))
            bound = ((k + 6) / 2 + 1) * EPS * want + np.sqrt(count * TINY)
        else:
            want = x64.sum(1) / (count if op == "mean" else 1)
            bound = (k + 6) * EPS / 2 * np.abs(x64).sum(1) / (count if op == "mean" else 1) + count * TINY \
                + (1.5 * EPS * np.abs(want) + TINY if op == "mean" else 0)
        assert np.all(np.abs(r - want)[fine] <= bound[fine]), np.max((np.abs(r - want) / bound)[fine])
        assert np.array_equal(np.isnan(r), np.isnan(x64).any(1) | (np.isinf(x64).any(1) & (op != "vector_norm")
                                                                  & np.isnan(x64.sum(1))))
    if op != "vector_norm" and count >= 63 and len(r) > 1:
        assert (np.signbit(r) & (r == 0)).any()                       # (a -0 sum reached)


def test_reduce_twins_are_the_canonical_order():
    """sum_ / mean / vector_norm's references sum each output's values in the canonical order:
    equal to that order written from its definition (value by value, the logical order of
    the reduced dims, strided or several), for counts below, at and past 64 and rounds not whole;
    not numpy's order (pairwise); the accumulate fast path of sum_canonical equal to its
    round-by-round path; -0 and +0 as the order gives them."""
    rng = np.random.default_rng(11)
    sum_ = get_op("sum").reference
    for shape, dims in [((3, 5), [1]), ((2, 63), [1]), ((2, 64), [-1]), ((2, 65), [1]), ((130, 2), [0]),
                        ((3, 4, 5), [0, 2]), ((2, 3, 30), None), ((4, 200), [1])]:
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        if shape == (2, 64):
            x[1] = zeros_of_both_signs(rng, 64)
        red = sorted({d % x.ndim for d in dims}) if dims else list(range(x.ndim))
        keep = [d for d in range(x.ndim) if d not in red]
        rows = np.transpose(x, keep + red).reshape(-1, math.prod(shape[d] for d in red))
        want = np.array([canonical_sum_by_definition(fm.ftz(v)) for v in rows], np.float32)
        assert_same_bits(sum_(x, dims=dims).reshape(-1), want)
        sq = np.array([canonical_sum_by_definition(fm.ftz(v * v)) for v in rows], np.float32)
        assert_same_bits(get_op("vector_norm").reference(x, dims=dims).reshape(-1), fm.sqrt_f32(sq))
        inv = np.float32(1.0 / rows.shape[1])
        assert_same_bits(get_op("mean").reference(x, dims=dims).reshape(-1), fm.ftz(want * inv))
    # 2^24 then 64 ones (partial 0 loses its 1; the other 63 are summed before it): 2^24 + 62
    y = np.ones(65, np.float32)
    y[0] = 2.0 ** 24
    assert sum_(y) == 2.0 ** 24 + 62 and np.sum(y) != 2.0 ** 24 + 62
    big = rng.standard_normal((3, 5000)).astype(np.float32)
    assert (sum_(big, dims=[1]) != big.sum(1)).any()                   # not numpy's pairwise order
    # the accumulate fast path: the same bits as round by round
    terms = rng.standard_normal((5, 40, 16, 4)).astype(np.float32)
    loop = np.zeros((5, 16, 4), np.float32)
    for i in range(40):
        loop = fm.ftz(loop + terms[:, i])
    assert_same_bits(fm._partials(terms), loop)
    z = zeros_of_both_signs(rng, 64 * 5 * 16 * 4).reshape(5, 64, 16, 4)
    loop = np.zeros((5, 16, 4), np.float32)
    for i in range(64):
        loop = fm.ftz(loop + z[:, i])
    assert_same_bits(fm._partials(z), loop)
    assert (np.signbit(loop) & (loop == 0)).any()
    assert not np.signbit(sum_(np.full(70, -0.0, np.float32)))         # -0s sum to +0 (from +0)

