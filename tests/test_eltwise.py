"""add_q8, mul_q8, clamp_q8: Vulkan == numpy reference bit for bit on every test device
(padding bytes included), and the reference within one int8 step of PyTorch's float
reference (dequantize -> float op -> quantize)."""
import numpy as np
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)

import oputil
from oputil import random_int8 as q8, torch_dequantize as dq, torch_quantize as qz
from vkq.ops.eltwise import add_q8_params, clamp_q8_params, mul_q8_params
from vkq.registry import get_op



def all_pairs():
    """Every (a, b) int8 pair once: two (4, 16, 32, 32) tensors."""
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    return a.astype(np.int8).reshape(4, 16, 32, 32), b.astype(np.int8).reshape(4, 16, 32, 32)


def run_exact(device, op, attrs, layout, *arrays):
    """Run one op on the device against its reference (same shape in and out); see oputil."""
    return oputil.run_exact(device, op, attrs, arrays[0].shape, *arrays, layout=layout)


def reference(op, attrs, *arrays):
    return get_op(op).reference(*arrays, **attrs)


def activate(x, act, bounds=None):
    lo, hi = {None: (None, None), "relu": (0.0, None), "relu6": (0.0, 6.0), "hardtanh": bounds}[act]
    return x if act is None else torch.clamp(x, lo, hi)


def assert_near_torch(ref, expected, exact):
    """Within one int8 step of torch, and off by one only where the exact real result
    (`exact`, float64, in output steps) is within 0.005 of a rounding tie: there the integer
    reference rounds half up and torch rounds its float32 value half to even."""
    diff = np.abs(ref.astype(np.int32) - expected.astype(np.int32))
    assert diff.max() <= 1, f"max difference {diff.max()} steps"
    tie = np.abs(np.asarray(exact) % 1.0 - 0.5) < 0.005
    assert not np.any((diff != 0) & ~tie), f"{np.sum((diff != 0) & ~tie)} values off by one away from a tie"


def steps(x, scale, zp):
    """A real value in output steps (float64), before rounding."""
    return np.asarray(x, np.float64) / scale + zp


def f64(q, scale, zp):
    return (np.asarray(q, np.float64) - zp) * scale


# (a_scale, a_zp, b_scale, b_zp, out_scale, out_zp, activation)
ADD_CASES = {
    "typical": (0.05, -3, 0.02, 7, 0.06, -10, None),
    "zp_extremes": (0.03, -128, 0.03, 127, 0.05, 127, None),
    "relu": (0.05, 127, 0.07, -128, 0.09, -20, "relu"),
    "relu6_equal": (0.04, 0, 0.04, 0, 0.04, -100, "relu6"),
    "scale_ratio_1e4": (1.0, 5, 1e-4, -7, 0.9, 0, None),
    "out_finer": (0.5, 0, 0.25, 0, 0.01, 0, None),
    "out_coarser": (0.001, -128, 0.002, 127, 0.05, 0, None),
    "ratio_2e7": (2.0, 3, 1.0, -4, 1e-7, 0, None),   # the 64-bit path (add_shift_only is None)
}
MUL_CASES = {
    "typical": (0.05, -3, 0.02, 7, 0.004, -10, None),
    "zp_extremes": (0.1, -128, 0.1, 127, 0.99, 127, None),      # M ~ 0.0101
    "near_one": (1.0, 0, 1.0, 0, 1.0 - 2 ** -12, 5, "relu"),     # M just above 1
    "tiny": (2 ** -7, 3, 2 ** -7, -3, 1, 0, None),               # M = 2^-14: |out| <= 4
}
# (in_scale, in_zp, out_scale, out_zp, activation, bounds)
CLAMP_CASES = {
    "relu_same": (0.05, -20, 0.05, -20, "relu", None),
    "relu6_same": (0.05, -128, 0.05, -128, "relu6", None),
    "hardtanh_same": (0.1, 127, 0.1, 127, "hardtanh", (-2.5, 1.0)),
    "relu_requant": (0.05, 3, 0.025, -128, "relu", None),
    "relu6_requant": (0.1, -128, 6 / 255, -128, "relu6", None),
    "hardtanh_requant": (0.02, 127, 0.01, 0, "hardtanh", (-1.0, 1.0)),
}
SHAPES = [((1, 3, 5, 17), "4W4C"), ((2, 5, 7, 3), "4H4W"), ((37,), "4W4C"), ((3, 13, 1), "4H4W"),
          # ROW (ranks 5, 6): 210 values end half way into a word, 360 half way into a block
          ((1, 2, 3, 5, 7), "ROW"), ((2, 3, 1, 4, 5, 3), "ROW")]


@pytest.mark.parametrize("case", ADD_CASES)
def test_add_matches_torch(case):
    sa, za, sb, zb, so, zo, act = ADD_CASES[case]
    a, b = all_pairs()
    ref = reference("add_q8", add_q8_params(sa, za, sb, zb, so, zo, act), a, b)
    assert_near_torch(ref, qz(activate(dq(a, sa, za) + dq(b, sb, zb), act), so, zo),
                      steps(f64(a, sa, za) + f64(b, sb, zb), so, zo))


@pytest.mark.parametrize("case", MUL_CASES)
def test_mul_matches_torch(case):
    sa, za, sb, zb, so, zo, act = MUL_CASES[case]
    a, b = all_pairs()
    ref = reference("mul_q8", mul_q8_params(sa, za, sb, zb, so, zo, act), a, b)
    assert_near_torch(ref, qz(activate(dq(a, sa, za) * dq(b, sb, zb), act), so, zo),
                      steps(f64(a, sa, za) * f64(b, sb, zb), so, zo))


@pytest.mark.parametrize("case", CLAMP_CASES)
def test_clamp_matches_torch(case):
    si, zi, so, zo, act, bounds = CLAMP_CASES[case]
    q = np.arange(-128, 128, dtype=np.int8)
    attrs = clamp_q8_params(si, zi, so, zo, act, bounds)
    ref = reference("clamp_q8", attrs, q)
    assert_near_torch(ref, qz(activate(dq(q, si, zi), act, bounds), so, zo), steps(f64(q, si, zi), so, zo))
    if (si, zi) == (so, zo):   # same qparams: a pure clamp, exactly
        np.testing.assert_array_equal(ref, np.clip(q, attrs["qmin"], attrs["qmax"]))


def test_add_params_keep_int32_exact():
    p = add_q8_params(0.3, 0, 0.1, 0, 0.2, 0)     # ratios 1.5, 0.5: S = 22 (255 * 2 * 2^23 would not fit)
    assert (p["a_mult"], p["b_mult"], p["multiplier"], p["shift"]) == (3 << 21, 1 << 21, 1 << 30, 52)
    p = add_q8_params(0.07, 3, 0.013, -9, 0.05, 1)
    shift = p["shift"] - 30
    assert p["multiplier"] == 1 << 30 and abs(p["a_mult"] / 2.0 ** shift - 0.07 / 0.05) <= 2.0 ** -(shift + 1)
    assert 255 * (p["a_mult"] + p["b_mult"]) + 2 ** (shift - 1) < 2 ** 31 <= 255 * 2 * (p["a_mult"] + p["b_mult"])
    tiny = add_q8_params(1e-3, 0, 1e-3, 0, 1e6, 0)   # the shift stops at 30; the weights round to 0 or 1
    assert tiny["multiplier"] == 1 << 30 and tiny["shift"] == 60
    huge = add_q8_params(3.0, 0, 1.0, 0, 1e-7, 0)    # no shift >= 1 fits: the general multiplier
    assert huge["a_mult"] == 1 << 22 and huge["b_mult"] == round((1 << 22) / 3) and huge["multiplier"] != 1 << 30


def test_add_shift_only_finds_ties():
    """add_shift_only's checks over all 2^16 pairs: dyadic ratios (0.625, 0.5) reach a tie,
    generic ones do not; a general multiplier, sums over int32, zero points or output bounds
    outside int8 (a hand-made program) take the 64-bit path."""
    from vkq.ops.eltwise import add_shift_only
    shift, offset, ties = add_shift_only(add_q8_params(0.05, 3, 0.04, -5, 0.08, 1))
    assert ties and shift == 22
    assert offset == (1 << 21) - 1 - 3 * 5 * (1 << 19) + 5 * (1 << 21)
    assert not add_shift_only(add_q8_params(0.0713, 3, 0.0291, -5, 0.0838, 1))[2]
    assert add_shift_only(add_q8_params(3.0, 0, 1.0, 0, 1e-7, 0)) is None
    assert add_shift_only(dict(add_q8_params(0.3, 0, 0.1, 0, 0.2, 0), a_mult=1 << 24)) is None
    assert add_shift_only(dict(add_q8_params(0.3, 0, 0.1, 0, 0.2, 0), a_zp=5000)) is None
    assert add_shift_only(dict(add_q8_params(0.3, 0, 0.1, 0, 0.2, 0), qmax=70000)) is None


# -- on the devices -----------------------------------------------------------------------------

@pytest.mark.parametrize("case", ADD_CASES)
def test_add_all_pairs(loads_device, case):
    sa, za, sb, zb, so, zo, act = ADD_CASES[case]
    run_exact(loads_device, "add_q8", add_q8_params(sa, za, sb, zb, so, zo, act), "4W4C", *all_pairs())


@pytest.mark.parametrize("case", MUL_CASES)
def test_mul_all_pairs(loads_device, case):
    sa, za, sb, zb, so, zo, act = MUL_CASES[case]
    run_exact(loads_device, "mul_q8", mul_q8_params(sa, za, sb, zb, so, zo, act), "4H4W", *all_pairs())


@pytest.mark.parametrize("shape,layout", SHAPES)
def test_binary_odd_shapes(loads_device, shape, layout):
    rng = np.random.default_rng(sum(shape))
    a, b = q8(rng, shape), q8(rng, shape)
    run_exact(loads_device, "add_q8", add_q8_params(*ADD_CASES["relu"]), layout, a, b)
    run_exact(loads_device, "mul_q8", mul_q8_params(*MUL_CASES["zp_extremes"]), layout, a, b)


@pytest.mark.parametrize("case", CLAMP_CASES)
@pytest.mark.parametrize("shape,layout", SHAPES[:2] + SHAPES[4:5])
def test_clamp(device, case, shape, layout):
    q = q8(np.random.default_rng(7), shape)
    ref = run_exact(device, "clamp_q8", clamp_q8_params(*CLAMP_CASES[case]), layout, q)
    assert len(np.unique(ref)) > 2   # the case clamps some values and keeps others


def test_add_large(device):
    """A MobileNetV2 residual add (1, 24, 56, 56) in 4W4C."""
    rng = np.random.default_rng(3)
    a, b = q8(rng, (1, 24, 56, 56)), q8(rng, (1, 24, 56, 56))
    run_exact(device, "add_q8", add_q8_params(*ADD_CASES["typical"]), "4W4C", a, b)


def test_words_equal_to_int_min_are_stored_as_they_are(device):
    """before_store (shaders/include/common.glsl) is a max with INT_MIN before each store: a
    packed word 0x80000000 (bytes 0, 0, 0, -128) must come out unchanged. Identity add and clamp
    of a tensor whose first channel block is that word at every pixel."""
    rng = np.random.default_rng(11)
    a = q8(rng, (1, 8, 5, 6))
    a[:, :3], a[:, 3] = 0, -128                      # 4W4C: channels 0-3 are one word a pixel
    for op, attrs, arrays in [("add_q8", add_q8_params(0.1, 0, 0.1, 0, 0.1, 0), (a, np.zeros_like(a))),
                              ("clamp_q8", clamp_q8_params(0.1, -128, 0.1, -128, "relu"), (a,))]:
        np.testing.assert_array_equal(run_exact(device, op, attrs, "4W4C", *arrays), a)


@pytest.mark.parametrize("case,ties,shift_only", [("typical", 1, 1), ("zp_extremes", 0, 1), ("ratio_2e7", 0, 0)])
def test_add_skips_the_tie_test_only_where_no_sum_can_tie(device, case, ties, shift_only):
    """eltwise_binary's TIES and SHIFT_ONLY: a rounding shift where add_q8_params made the
    multiplier 2^-S, with the round-half-to-even term only where some pair of int8 inputs lands
    half way (add_shift_only: "typical" does, by chance of its weights' low bits); the 64-bit
    requantize for a ratio of 2e7, its tie test dropped where requant_tie_free proves it. The
    all-pairs tests above run each kind exactly."""
    from vkq.executor import VulkanExecutor
    shape = (1, 8, 4, 4)
    prog = oputil.single_op_program("add_q8", [("a", oputil.spec(shape, "int8", "4W4C")),
                                               ("b", oputil.spec(shape, "int8", "4W4C"))],
                                    [("y", oputil.spec(shape, "int8", "4W4C"))], add_q8_params(*ADD_CASES[case]))
    ex = VulkanExecutor(prog, device)
    assert [tuple(st.spec[-2:]) for seg in ex.segments for st in seg[1].steps] == [(ties, shift_only)]
