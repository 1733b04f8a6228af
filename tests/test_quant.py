"""The quantization arithmetic (vkq/quant.py) against PyTorch and exact rationals."""
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)

from fractions import Fraction

from vkq.quant import (ACC_BIAS_LIMIT, FRAC_SHIFT, activation_bounds, dequantize, fit_bias_to_accumulator, quantize, quantize_multiplier, requant_clamp_frac,
                       requant_clamp_params, requant_tie_free, requantize, requantize_clamped, shift_word, split_bias)


@pytest.mark.parametrize("scale,zp", [(0.05, 3), (1 / 3, -128), (0.0078125, 127), (0.1, 0), (2.5e-4, -7)])
def test_quantize_matches_torch_bit_for_bit(scale, zp):
    rng = np.random.default_rng(0)
    x = rng.normal(0, 40 * scale, 5000).astype(np.float32)
    x[:200] = (np.arange(200) - 100 + 0.5).astype(np.float32) * np.float32(scale)  # ties
    want = torch.ops.quantized_decomposed.quantize_per_tensor(torch.from_numpy(x), scale, zp, -128, 127, torch.int8)
    np.testing.assert_array_equal(quantize(x, scale, zp), want.numpy())
    deq = torch.ops.quantized_decomposed.dequantize_per_tensor(want, scale, zp, -128, 127, torch.int8)
    np.testing.assert_array_equal(dequantize(want.numpy(), scale, zp), deq.numpy())


@pytest.mark.parametrize("real", [1.0, 0.9999999, 0.5, 2 ** -20, 2 ** -20 * 1.37, 0.3e-3, 1.5, 3.7, 2 ** -31 * 1.2])
def test_multiplier_is_accurate(real):
    m, s = quantize_multiplier(real)
    assert (1 << 30) <= m < (1 << 31) and 1 <= s <= 62
    assert abs(m / 2 ** s - real) <= real * 2 ** -30


def _round_half_even(f: Fraction) -> int:
    r = (f + Fraction(1, 2)).__floor__()
    return r - 1 if (r - f == Fraction(1, 2) and r % 2) else r


def test_requantize_rounds_the_fixed_point_product_half_to_even():
    """r = round_half_to_even(acc * m / 2^s), computed with exact rationals; dyadic
    multipliers (an average of 4, 2^-13) make ties frequent."""
    rng = np.random.default_rng(1)
    acc = rng.integers(-2 ** 20, 2 ** 20, 3000).astype(np.int32)
    acc[:4] = [-2 ** 31, 2 ** 31 - 1, 0, -1]
    acc[4:200] = np.arange(-98, 98)   # small values: ties for the dyadic multipliers
    for real, zp in ((1.3e-4, 0), (2 ** -20 * 77, -128), (6e-5, 127), (0.5 ** 13, 5), (0.25, 0), (0.5, -3)):
        m, s = quantize_multiplier(real)
        exact = [_round_half_even(Fraction(int(a) * m, 2 ** s)) for a in acc]
        want = np.clip(np.clip(exact, -2 ** 16, 2 ** 16) + zp, -128, 127)
        np.testing.assert_array_equal(requantize(acc, m, s, zp), want)


def test_requantize_close_to_float():
    rng = np.random.default_rng(2)
    acc = rng.integers(-200000, 200000, 5000)
    real = 3.1e-4
    m, s = quantize_multiplier(real)
    got = requantize(acc, m, s, -5).astype(int)
    want = np.clip(np.rint(acc * real) - 5, -128, 127)
    assert np.abs(got - want).max() <= 1


def clamped_cases(rng, n=6000):
    """(acc, m, s) triples for requantize_clamped: multipliers from 2^-40 to 2^29 and 0, dyadic
    ones (exact ties), accumulators over the whole int32 range and around every half step."""
    reals = list(np.exp(rng.uniform(np.log(2.0 ** -40), np.log(2.0 ** 29), 40)))
    reals += [0.0, 1.0, 0.25, 2.0 ** -13, 2.0 ** -33, 0.75 * 2.0 ** -30, 2.0 ** 27, 2.0 ** 29]
    for real in reals:
        m, s = quantize_multiplier(real)
        acc = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64)
        acc[n // 2:] >>= rng.integers(0, 31, n - n // 2)
        if m:   # around half steps k + 1/2, k up to the clamp bound and past it
            k = rng.integers(-400, 400, n // 3)
            near = np.round((k + 0.5) * 2.0 ** s / m) + rng.integers(-2, 3, k.size)
            acc[:k.size] = np.clip(near, -2 ** 31, 2 ** 31 - 1)
        acc[-4:] = [-2 ** 31, 2 ** 31 - 1, 0, -1]
        yield acc.astype(np.int32), m, s


def test_requantize_clamped_equals_requantize():
    """The device's cheaper requantization (host constants, no branch on s) gives requantize's
    int8 result for every accumulator, zero point and clamp."""
    rng = np.random.default_rng(3)
    ties = 0
    for acc, m, s in clamped_cases(rng):
        params = requant_clamp_params(m, s)
        for zp, qmin, qmax in ((0, -128, 127), (-128, -128, 127), (127, -128, 127), (5, 5, 60), (-3, -128, -100)):
            np.testing.assert_array_equal(requantize_clamped(acc, *params, zp, qmin, qmax),
                                          requantize(acc, m, s, zp, qmin, qmax), err_msg=f"m={m} s={s}")
        if m and s <= 40:
            ties += int(np.sum((acc.astype(np.int64) * m) % (1 << s) == 1 << (s - 1)))
    assert ties > 100    # the half-way cases were exercised


def test_requant_tie_free_drops_the_tie_correction_only_where_no_tie_exists():
    """Where requant_tie_free says so, requantize_clamped without its round-half-to-even
    correction still equals requantize; a tie needs acc = odd * 2^k, so those accumulators are
    tried for every k. Dyadic multipliers are not tie-free (and do tie)."""
    rng = np.random.default_rng(4)
    odd = np.arange(1, 64, 2)
    acc = np.concatenate([np.clip(sign * (odd[:, None] << np.arange(31)), -2 ** 31, 2 ** 31 - 1).reshape(-1)
                          for sign in (1, -1)]).astype(np.int32)
    free = 0
    for acc_r, m, s in clamped_cases(rng, 3000):
        params = requant_clamp_params(m, s)
        a = np.concatenate([acc, acc_r])
        if requant_tie_free(m, s):
            free += 1
            np.testing.assert_array_equal(requantize_clamped(a, *params, -7, ties=False), requantize(a, m, s, -7))
    assert free > 30
    for real in (0.25, 2.0 ** -13, 0.75 * 2.0 ** -30):
        m, s = quantize_multiplier(real)
        assert not requant_tie_free(m, s)


def _fracs(rng, m, n):
    """Bias fractions for multiplier m: random, the extremes +-m/2, and 0."""
    frac = split_bias(rng.uniform(-0.5, 0.5, n), m)[1]
    frac[:3] = [(m >> 11) << 10, -((m >> 11) << 10), 0]
    return frac


def test_split_bias():
    """B + frac / m is the bias to within 2^-20 of an accumulator unit (twice that where frac is
    held at m / 2), frac a multiple of 2^FRAC_SHIFT with |frac| <= m / 2; integer biases split
    into themselves and 0."""
    rng = np.random.default_rng(11)
    m = rng.integers(1 << 30, 1 << 31, 5000)
    bias = rng.normal(0, 1e4, 5000)
    bias[:4] = [0.5, -0.5, 2.5, -1e-9]
    whole, frac = split_bias(bias, m)
    assert np.all(frac % (1 << FRAC_SHIFT) == 0) and np.all(np.abs(frac) <= m // 2)
    assert np.abs(whole + frac / m - bias).max() <= 2.0 ** -19
    whole, frac = split_bias(np.array([7, -3], np.int32), m[:2])
    assert whole.tolist() == [7, -3] and frac.tolist() == [0, 0]
    assert split_bias(np.array([0.25]), np.array([0]))[1].tolist() == [0]    # m = 0: nothing to add


def test_fit_bias_to_accumulator_coarsens_only_the_channels_that_need_it():
    """A channel whose bias at the accumulator's scale passes 2^29 gets the least power-of-two
    coarser weight scale that brings it within, its weights divided by that power half to even;
    the others keep PT2E's weights and scales to the bit."""
    rng = np.random.default_rng(3)
    wq = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    ws = np.array([0.01, 1e-9, 3e-10, 0.02])
    bias = np.array([0.5, 2.0, -3.0, 1e4])
    x_scale = 0.02
    got_w, got_s = fit_bias_to_accumulator(wq, ws, x_scale, bias)
    for c in (0, 3):
        assert got_s[c] == ws[c] and np.array_equal(got_w[c], wq[c])
    for c in (1, 2):
        k = round(np.log2(got_s[c] / ws[c]))
        assert k >= 1 and got_s[c] == ws[c] * 2.0 ** k
        assert abs(bias[c]) / (x_scale * got_s[c]) <= ACC_BIAS_LIMIT < abs(bias[c]) / (x_scale * got_s[c] / 2)
        assert np.array_equal(got_w[c], np.rint(wq[c] / 2.0 ** k).astype(np.int8))
    assert got_w.dtype == np.int8
    same_w, same_s = fit_bias_to_accumulator(wq[:1], ws[:1], x_scale, bias[:1])
    assert same_w is wq[:1].base or np.array_equal(same_w, wq[:1])


def test_requantize_with_frac_is_exact():
    """requantize(acc, m, s, ..., frac) = round_half_to_even((acc * m + frac) / 2^s) + zp, clamped,
    computed with exact fractions; ties included (dyadic m and fractions that land half way)."""
    rng = np.random.default_rng(12)
    for real in list(np.exp(rng.uniform(np.log(2.0 ** -30), np.log(2.0 ** 6), 12))) + [0.25, 0.75 * 2.0 ** -9]:
        m, s = quantize_multiplier(real)
        frac = _fracs(rng, m, 400)
        acc = rng.integers(-2 ** 16, 2 ** 16, 400) >> rng.integers(0, 16, 400)
        k = rng.integers(-300, 300, 400)      # accumulators whose value is near k + 1/2
        acc[200:] = np.clip(np.round(((k[200:] + 0.5) * 2.0 ** s - frac[200:]) / m), -2 ** 31, 2 ** 31 - 1)
        got = requantize(acc, m, s, 3, -128, 127, frac)
        want = [min(max(round(Fraction(int(a) * m + int(f), 1 << s)) + 3, -128), 127) for a, f in zip(acc, frac)]
        np.testing.assert_array_equal(got, want, err_msg=f"m={m} s={s}")
    # exact ties from the fraction: m = 3 * 2^29, s = 38, frac = 2^29: acc = 85 + 512 j is k + 1/2
    acc = 85 + 512 * np.arange(-20, 20)
    got = requantize(acc, 3 << 29, 38, 0, -128, 127, 1 << 29)
    want = [round(Fraction(int(a) * (3 << 29) + (1 << 29), 1 << 38)) for a in acc]
    assert all(Fraction(int(a) * (3 << 29) + (1 << 29), 1 << 38).denominator == 2 for a in acc)
    np.testing.assert_array_equal(got, np.clip(want, -128, 127))


def test_requantize_clamped_with_frac_equals_requantize():
    """requantize_clamped with requant_clamp_frac's fraction equals requantize with frac, for
    accumulators everywhere and around every half step, the largest fractions included."""
    rng = np.random.default_rng(13)
    for acc, m, s in clamped_cases(rng, 3000):
        frac = _fracs(rng, m, acc.size) if m else np.zeros(acc.size, np.int64)
        if m:   # around (k + 1/2) - frac / m
            k = rng.integers(-400, 400, 1000)
            near = np.round(((k + 0.5) * 2.0 ** s - frac[-1000:]) / m) + rng.integers(-1, 2, k.size)
            acc[-1000:] = np.clip(near, -2 ** 31, 2 ** 31 - 1)
        params = requant_clamp_params(m, s)
        fr = requant_clamp_frac(m, s, frac)
        for zp, qmin, qmax in ((0, -128, 127), (127, -128, 127), (-3, -128, -100)):
            np.testing.assert_array_equal(requantize_clamped(acc, *params, zp, qmin, qmax, frac=fr),
                                          requantize(acc, m, s, zp, qmin, qmax, frac), err_msg=f"m={m} s={s}")
    # fraction-made ties round half to even in the clamped form too
    acc = 85 + 512 * np.arange(-20, 20)
    m, s, f = 3 << 29, 38, 1 << 29
    np.testing.assert_array_equal(requantize_clamped(acc, *requant_clamp_params(m, s), 0, frac=requant_clamp_frac(m, s, f)),
                                  requantize(acc, m, s, 0, frac=f))


def test_requant_tie_free_with_frac_is_exact():
    """With a fraction, ties are where acc * m + frac = 2^(s-1) (mod 2^s): requant_tie_free says
    tie-free exactly when no accumulator in the clamped range gets there (checked by trying them
    all), and where it says so, dropping the tie correction changes nothing."""
    m, s = (1 << 30) + (1 << 20), 40          # trailing zeros: fractions decide whether ties exist
    bound = int(requant_clamp_params(m, s)[0][0])
    acc = np.arange(-bound - 1, bound + 1, dtype=np.int64)
    seen = set()
    for c in list(range(-8, 9)) + [(1 << 9) - 1, -(1 << 9)]:
        frac = c << 20
        tie = np.any((acc * m + frac) % (1 << s) == 1 << (s - 1))
        assert requant_tie_free(m, s, frac) == (not tie), c
        seen.add(bool(tie))
        if not tie:
            np.testing.assert_array_equal(requantize_clamped(acc, *requant_clamp_params(m, s), 1, ties=False, frac=frac),
                                          requantize(acc, m, s, 1, frac=frac))
    assert seen == {True, False}
    assert requant_tie_free(m, s) and not requant_tie_free(3 << 29, 38, 1 << 29)


def test_shift_word_holds_the_fraction():
    w = shift_word([0, 30, 3], [1, 30, 9], [-(1 << 30), 1 << 30, -1024])
    assert (w & 31).tolist() == [0, 30, 3] and ((w >> 5) & 31).tolist() == [1, 30, 9]
    assert (w & ~1023).tolist() == [-(1 << 30), 1 << 30, -1024]
    with pytest.raises(ValueError):
        shift_word(0, 1, 512)


def test_requant_clamp_params_refuses_unnormalised_multipliers():
    with pytest.raises(ValueError):
        requant_clamp_params(12345, 40)


def test_activation_bounds():
    assert activation_bounds(None, 0.1, 3) == (-128, 127)
    assert activation_bounds("relu", 0.1, 3) == (3, 127)
    assert activation_bounds("relu6", 0.1, -128) == (-128, -68)
    assert activation_bounds("hardtanh", 0.1, 0, (-1.0, 1.0)) == (-10, 10)
    with pytest.raises(ValueError):
        activation_bounds("gelu", 0.1, 0)
