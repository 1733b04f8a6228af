"""Bit-exact float ops (issue 59; shaders/include/float_exact.glsl's rules): the device gives
the numpy reference's bits exactly, on every driver, texel and ssbo loads, a lane, a subgroup
or a workgroup a row, at any subgroup size (run this file under LP_NATIVE_VECTOR_WIDTH=128,
256, 512 for lavapipe's 4, 8, 16 lanes). The references are float32 step sequences
(vkq/ops/float.py silu_f32, rms_norm), themselves checked against torch here."""
import warnings

import numpy as np
import pytest

from test_float_ops import lane_rows, run_op   # noqa: F401  (lane_rows: a fixture)
from vkq.ops import float as fops

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
    assert_same_bits(ref, fops.silu_f32(x))
    # what it gives: -0 for -inf and below -87, x's signed zero for zeros and subnormals
    assert_same_bits(fops.silu_f32(np.array([-np.inf, -100.0, -0.0, 1e-40, -1e-40, np.inf, np.nan], np.float32)),
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


def test_sum_squares_canonical_order():
    """The canonical sum is a float32 sum close to the float64 one, and it is an order of its
    own (not numpy's): it differs from a sequential float32 sum somewhere."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 3001)).astype(np.float32)
    s = fops.sum_squares_canonical(x)
    want = (x.astype(np.float64) ** 2).sum(1)
    assert np.abs(s - want).max() <= 3001 * EPS * want.max()
    seq = np.zeros(64, np.float32)
    for j in range(x.shape[1]):
        seq = seq + x[:, j] * x[:, j]
    assert (seq != s).any()
    # partial j % 64, then the fixed tree: a row of ones sums exactly, and order shows on 2^24 + 1s
    assert fops.sum_squares_canonical(np.ones((1, 577), np.float32))[0] == 577
    y = np.ones((1, 65), np.float32)
    y[0, 0] = 4096.0            # 2^24: partial 0 loses value 64's 1; the other 63 ones are summed first
    assert fops.sum_squares_canonical(y)[0] == 2.0 ** 24 + 62    # (a sequential sum: 2^24)


def test_recip_newton_is_within_1_21_ulp():
    """On [1, 2^100] (silu takes s past 2^64 down by 2^-64 first); 1 and 1/2 exact."""
    rng = np.random.default_rng(9)
    s = np.concatenate([np.exp2(rng.uniform(0, 100, 200_000)), [1.0, 2.0, 3.0, 1.5]]).astype(np.float32)
    got = fops.recip_newton(s).astype(np.float64)
    want = 1 / s.astype(np.float64)
    assert (np.abs(got - want) / np.spacing(want.astype(np.float32))).max() <= 1.21
    assert fops.recip_newton(np.float32(1.0)) == 1.0 and fops.recip_newton(np.float32(2.0)) == 0.5
