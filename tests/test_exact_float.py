"""Bit-exact float ops (issue 59; shaders/include/float_exact.glsl's rules): the device gives
the numpy reference's bits exactly, on every driver, texel and ssbo loads, a lane, a subgroup
or a workgroup a row, at any subgroup size (run this file under LP_NATIVE_VECTOR_WIDTH=128,
256, 512 for lavapipe's 4, 8, 16 lanes). The references are float32 step sequences
(vkq/ops/float_math.py silu_f32, vkq/ops/float_norm.py rms_norm), themselves checked against torch here."""
import warnings

import numpy as np
import pytest

from test_float_ops import lane_rows, run_op   # noqa: F401  (lane_rows: a fixture)
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
