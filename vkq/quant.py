"""Quantization arithmetic shared by every op: one definition, used by the numpy
references and mirrored line by line in shaders/include/requant.glsl.

Quantize (float -> int8), as torch.ops.quantized_decomposed.quantize_per_tensor does:
    q = clamp(rint(x * (1/scale)) + zero_point, qmin, qmax)      # rint = round half to even
Dequantize: x = (q - zero_point) * scale

Requantize (int32 accumulator -> int8), integer fixed point, 32-bit operations only on device:
    the real multiplier M > 0 is written once on the host as  M ~= m * 2^-s
    with m an int32 in [2^30, 2^31) and s in [1, 62];
    r   = round_half_to_even(acc * m / 2^s)        # exact 64-bit product
        = floor((acc * m + 2^(s-1)) / 2^s), minus 1 when that is odd and the division was a tie
    out = clamp(clamp(r, -2^16, 2^16) + zero_point, qmin, qmax)
Ties round to even as PyTorch's quantize does (rint): they are frequent where the multiplier is
dyadic (an average pool over 4 values with shared qparams) and rare elsewhere.
The inner clamp keeps the zero-point add in range; it never changes an int8 result because
|zero_point| <= 128. Shaders form acc * m with imulExtended (hi, lo words) and shift the pair:
no 64-bit integers, so SwiftShader and phones agree bit for bit with this numpy code.
A multiplier too small to matter (s > 62 needed) becomes m = 0: every output is the zero point.

A conv/linear bias at the accumulator's scale (b / (x_scale * w_scale), float64) is not an
integer: rounding it moves ~1 output in 1000 across a rounding boundary, and those errors grow
layer by layer. So it is split (split_bias) into B = rint(bias), added to acc, and the rest in
units of 1/m, frac, added to the 64-bit product:  biased = acc * m + frac + 2^(s-1).

Kernels whose epilogue is a large share of their work (depthwise and small-K convolutions)
use requant_clamp_params / requantize_clamped instead: the same int8 result for every int32
acc, with the case analysis on s done once on the host instead of per value on the device.
"""
from __future__ import annotations

import numpy as np

INT8_MIN, INT8_MAX = -128, 127


def quantize(x, scale: float, zero_point: int, qmin: int = INT8_MIN, qmax: int = INT8_MAX) -> np.ndarray:
    """Float -> int8 per tensor, bit-exact with quantized_decomposed.quantize_per_tensor (a NaN
    gives 0, as torch's float -> int8 cast does; numpy's is platform-defined)."""
    x = np.asarray(x, dtype=np.float32)
    inv = inverse_scale(scale)
    q = np.rint(x * inv) + np.float32(zero_point)
    return np.where(np.isnan(q), 0, np.clip(q, qmin, qmax)).astype(np.int8)


def inverse_scale(scale: float) -> np.float32:
    """1/scale as PyTorch forms it: divided in double, then used as a float32 operand."""
    return np.float32(1.0 / float(scale))


def dequantize(q, scale: float, zero_point: int) -> np.ndarray:
    """int8 -> float per tensor, as quantized_decomposed.dequantize_per_tensor."""
    return ((np.asarray(q).astype(np.int32) - np.int32(zero_point)).astype(np.float32)
            * np.float32(scale))


def fake_quantize(x, scale: float, zero_point: int, qmin: int = INT8_MIN, qmax: int = INT8_MAX) -> np.ndarray:
    """dequantize(quantize(x)): PT2E's pair on a float tensor whose int8 value nothing else
    reads, bit for bit (shaders/include/fake_quant.glsl)."""
    return dequantize(quantize(x, scale, zero_point, qmin, qmax), scale, zero_point)


def fake_quant_push(fq: dict | None) -> tuple:
    """The push-constant values of shaders/include/fake_quant.glsl's FakeQuant for the attrs
    {scale, zero_point, qmin, qmax} (None: unused words), to splat into a push tuple (a tuple
    as one value would become one float array)."""
    if not fq:
        return (np.float32(1.0), np.float32(1.0), 0, INT8_MIN, INT8_MAX)
    return (inverse_scale(fq["scale"]), np.float32(fq["scale"]), int(fq["zero_point"]),
            int(fq.get("qmin", INT8_MIN)), int(fq.get("qmax", INT8_MAX)))


def quantize_multiplier(real: float) -> tuple[int, int]:
    """Real multiplier M > 0  ->  (m, s) with M ~= m * 2^-s, m in [2^30, 2^31), s in [1, 62]."""
    real = float(real)
    if not np.isfinite(real) or real < 0:
        raise ValueError(f"requantization multiplier must be finite and >= 0, got {real}")
    if real == 0.0:
        return 0, 31
    frac, exp = np.frexp(real)              # real = frac * 2^exp, frac in [0.5, 1)
    m = int(round(float(frac) * (1 << 31)))
    if m == 1 << 31:                        # frac rounded up to 1.0
        m, exp = 1 << 30, exp + 1
    s = 31 - int(exp)
    if s > 62:                              # below 2^-31: every accumulator rounds to 0
        return 0, 31
    if s < 1:
        raise ValueError(f"requantization multiplier {real} is too large (must be < 2^30)")
    return m, s


def quantize_multipliers(real) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised quantize_multiplier: (m int32[C], s int32[C])."""
    pairs = [quantize_multiplier(r) for r in np.atleast_1d(np.asarray(real, dtype=np.float64))]
    return (np.array([p[0] for p in pairs], dtype=np.int32),
            np.array([p[1] for p in pairs], dtype=np.int32))


FRAC_SHIFT = 10   # frac is a multiple of 2^10: it then fits the 22 spare bits of a shift word


def split_bias(bias, m) -> tuple[np.ndarray, np.ndarray]:
    """A bias at the accumulator's scale -> (B, frac) int64 per channel: B = rint(bias) joins the
    accumulator, frac = (bias - B) * m rounded to a multiple of 2^FRAC_SHIFT, |frac| <= m / 2,
    joins requantize's product. Its resolution, 2^FRAC_SHIFT / m <= 2^-20 of an accumulator unit,
    is far finer than float32's rounding of PT2E's own float output. An integer bias (int32, as
    older programs hold) has frac 0."""
    bias = np.asarray(bias)
    m = np.asarray(m, np.int64)
    if bias.dtype.kind in "iu":
        return bias.astype(np.int64), np.zeros(np.broadcast(bias, m).shape, np.int64)
    b = bias.astype(np.float64)
    whole = np.rint(b)
    f = np.rint((b - whole) * m / float(1 << FRAC_SHIFT))       # |f| <= 2^20
    lim = m >> (FRAC_SHIFT + 1)
    f = np.clip(f, -lim, lim).astype(np.int64)
    return whole.astype(np.int64), f << FRAC_SHIFT


ACC_BIAS_LIMIT = 1 << 29   # |bias| at the accumulator's scale: room left for sum (x - x_zp) * w in int32


def fit_bias_to_accumulator(wq, ws, x_scale: float, bias) -> tuple[np.ndarray, np.ndarray]:
    """int8 weights wq (C, ...) with per-channel scales ws (C,) and a float bias (C,) -> (wq, ws)
    where the bias at the accumulator's scale, bias / (x_scale * ws), fits int32 with room for
    the products (ACC_BIAS_LIMIT). A channel whose weights are tiny beside its bias (a batch norm
    folded with gamma ~ 0 leaves w ~ 0 and bias = beta) would pass it: its weights are
    requantized to the scale ws * 2^k, the least k that fits (wq / 2^k, half to even). There the
    weights' share of the output, at most K * 2^14 accumulator units against a bias of 2^29, is
    what the coarser step rounds; every other channel is left exactly as PT2E quantized it."""
    wq = np.asarray(wq)
    ws = np.asarray(ws, np.float64).reshape(-1)
    need = np.abs(np.asarray(bias, np.float64).reshape(-1)) / (float(x_scale) * ws)
    k = np.where(need > ACC_BIAS_LIMIT, np.ceil(np.log2(np.maximum(need, 1) / ACC_BIAS_LIMIT)), 0).astype(np.int64)
    if not k.any():
        return wq, ws
    step = np.ldexp(1.0, k).reshape((-1,) + (1,) * (wq.ndim - 1))
    return np.rint(wq / step).astype(wq.dtype), ws * np.ldexp(1.0, k)


def requantize(acc, m, s, zero_point: int, qmin: int = INT8_MIN, qmax: int = INT8_MAX, frac=0) -> np.ndarray:
    """int32 accumulators -> int8 with the fixed-point multiplier (m, s) (scalars or per channel,
    broadcast against acc), plus a bias fraction frac (split_bias) in units of 1/m. The
    specification the shaders implement."""
    acc = np.asarray(acc, dtype=np.int64)
    m = np.asarray(m, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    # exact: |acc * m| <= 2^62, |frac| <= 2^30, 2^(s-1) <= 2^61
    biased = acc * m + np.asarray(frac, np.int64) + (np.int64(1) << (s - 1))
    r = biased >> s
    tie = (biased & ((np.int64(1) << s) - 1)) == 0    # acc * m / 2^s was exactly k + 1/2
    r = r - (tie & (r & 1).astype(bool))
    r = np.clip(r, -(1 << 16), 1 << 16) + zero_point
    return np.clip(r, qmin, qmax).astype(np.int8)


REQUANT_SPAN = 256   # |r| >= this clamps to qmin / qmax for every zero point in [-128, 127]


def requant_clamp_params(m, s) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-channel constants of requantize_clamped (shaders/include/requant.glsl) for (m, s):
    (bound, lshift, m, rshift), int32 arrays.

    requantize's output is int8, so an accumulator whose |r| reaches REQUANT_SPAN gives qmin or
    qmax whatever the zero point, exactly as its 2^16 saturation does; requantize is monotonic
    in acc, so acc may first be clamped to [-bound - 1, bound], bound * m > REQUANT_SPAN * 2^s
    + m / 2 (capped at 2^31 - 1, so that -2^31 stays itself): the m / 2 margin keeps this true
    with any bias fraction |frac| <= m / 2 added. Then a = acc << lshift with lshift =
    max(0, 33 - s) is exact (|a| <= 2^31: a small bound goes with a large multiplier) and
    acc * m / 2^s = a * m / 2^(32 + rshift) with rshift = s + lshift - 32 in [1, 30]: the shift
    always reaches into the product's high word, and no case depends on s on the device.
    s < 3 (M >= 2^27: every nonzero acc saturates) becomes (2^30, 3), which saturates alike."""
    m = np.atleast_1d(np.asarray(m, np.int64))
    s = np.atleast_1d(np.asarray(s, np.int64))
    huge = (s < 3) & (m != 0)
    m, s = np.where(huge, 1 << 30, m), np.where(huge, 3, s)
    bound = np.array([min(((REQUANT_SPAN << int(si)) + (int(mi) >> 1)) // int(mi) + 1 if mi else (1 << 31) - 1,
                          (1 << 31) - 1)
                      for mi, si in zip(m, s)], np.int64)
    lshift = np.where(m == 0, 0, np.maximum(0, 33 - s))     # m = 0: r = 0 whatever the shifts
    rshift = np.where(m == 0, 1, s + lshift - 32)
    if np.any((m != 0) & ((m < 1 << 30) | (m >= 1 << 31))) or np.any((s > 62) | ((bound + 1) << lshift > 1 << 31)):
        raise ValueError("requant_clamp_params takes quantize_multiplier's (m, s): m in [2^30, 2^31) or 0, s <= 62")
    return (bound.astype(np.int32), lshift.astype(np.int32), m.astype(np.int32), rshift.astype(np.int32))


def requant_clamp_frac(m, s, frac) -> np.ndarray:
    """The bias fraction requantize_clamped adds for requantize's (m, s, frac): frac itself, but
    where requant_clamp_params raised s < 3 to (2^30, 3) it is rescaled to that multiplier
    (frac / 2^s = frac' / 8), and capped at 2^29, beyond which acc = 0 saturates alike."""
    m, s, frac = np.broadcast_arrays(*(np.atleast_1d(np.asarray(v, np.int64)) for v in (m, s, frac)))
    huge = (s < 3) & (m != 0)
    scaled = np.clip(frac << np.where(huge, 3 - s, 0), -(1 << 29), 1 << 29)
    return np.where(huge, scaled, frac).astype(np.int64)


def _tie_reachable(m: int, s: int, frac: int, bound: int) -> bool:
    """Whether some acc in [-bound - 1, bound] has acc * m + frac = 2^(s-1) mod 2^s (a tie).
    With m = 2^v * odd, that needs 2^min(v, s) to divide t = 2^(s-1) - frac (mod 2^s); then the
    solutions are acc = acc0 mod 2^(s-v), acc0 = t / 2^v * odd^-1."""
    g = min((m & -m).bit_length() - 1, s)
    t = ((1 << (s - 1)) - frac) % (1 << s)
    if t % (1 << g):
        return False
    period = 1 << (s - g)
    acc0 = (t >> g) * pow(m >> g, -1, period) % period if period > 1 else 0
    return acc0 <= bound or acc0 - period >= -bound - 1


def requant_tie_free(m, s, frac=0) -> bool:
    """True when no int32 accumulator can make (acc * m + frac) / 2^s land exactly half way (for
    every channel), so requantize_clamped may drop its round-half-to-even correction; it only
    sees |acc| <= bound + 1. Without frac a tie needs acc = odd * 2^(s-1-v) (v: the trailing zero
    bits of m): generic multipliers (conv scales) are tie-free, dyadic ones (an average of 4,
    equal scales) are not. A fraction moves the ties anywhere, so they are solved for exactly."""
    bound, lshift, mc, rshift = (np.asarray(a, np.int64) for a in requant_clamp_params(m, s))
    fr = requant_clamp_frac(m, s, frac)
    s_eff = rshift + 32 - lshift          # the s requantize_clamped divides by (s < 3 was raised to 3)
    for mi, si, bi, fi in zip(*np.broadcast_arrays(mc, s_eff, bound, fr)):
        if mi != 0 and _tie_reachable(int(mi), int(si), int(fi), int(bi)):
            return False
    return True


def requantize_clamped(acc, bound, lshift, m, rshift, zero_point: int, qmin: int = INT8_MIN,
                       qmax: int = INT8_MAX, ties: bool = True, frac=0) -> np.ndarray:
    """What requant.glsl's requantize_clamped computes (numpy, int64), step by step; equal to
    requantize(acc, m, s, ..., frac) for the constants of requant_clamp_params(m, s) and
    requant_clamp_frac(m, s, frac) (tests check it), with ties=False too where
    requant_tie_free(m, s, frac)."""
    bound = np.asarray(bound, np.int64)
    lshift = np.asarray(lshift, np.int64)
    a = np.clip(np.asarray(acc, np.int64), -bound - 1, bound) << lshift
    # = hi * 2^32 + lo, |prod| < 2^62 + 2^60 (frac << lshift: |frac| <= 2^30, lshift <= 30)
    prod = a * np.asarray(m, np.int64) + (np.asarray(frac, np.int64) << lshift)
    hi, lo = prod >> 32, prod & 0xFFFFFFFF
    t = np.asarray(rshift, np.int64)
    hi = hi + (np.int64(1) << (t - 1))                # + half the divisor 2^(32 + t)
    r = hi >> t
    tie = ties & (lo == 0) & ((hi & ((np.int64(1) << t) - 1)) == 0)
    r = np.where(tie, r & ~np.int64(1), r)
    return np.clip(r + zero_point, qmin, qmax).astype(np.int8)


def shift_word(lshift, rshift, frac) -> np.ndarray:
    """requantize_clamped's shifts and bias fraction in one int32 word, as the conv and linear
    kernels read it: lshift | rshift << 5 | frac (frac a multiple of 2^FRAC_SHIFT, |frac| <= 2^30)."""
    frac = np.asarray(frac, np.int64)
    if np.any(frac & ((1 << FRAC_SHIFT) - 1)) or np.any(np.abs(frac) > 1 << 30):
        raise ValueError("a bias fraction must be a multiple of 2^FRAC_SHIFT within +-2^30 (split_bias)")
    return (np.asarray(lshift, np.int64) | np.asarray(rshift, np.int64) << 5 | frac).astype(np.int32)


def activation_bounds(activation: str | None, scale: float, zero_point: int,
                      bounds: tuple[float, float] | None = None) -> tuple[int, int]:
    """(qmin, qmax) that apply a fused activation in the integer domain.

    Quantization is monotonic, so quantize(clamp(x, lo, hi)) == clamp(quantize(x), quantize(lo),
    quantize(hi)); relu is clamp(x, 0, inf), relu6 clamp(x, 0, 6), hardtanh clamp(x, lo, hi)."""
    lo, hi = {None: (None, None), "relu": (0.0, None), "relu6": (0.0, 6.0)}.get(activation, (None, None))
    if activation == "hardtanh":
        if bounds is None:
            raise ValueError("hardtanh needs (min_val, max_val)")
        lo, hi = bounds
    elif activation not in (None, "relu", "relu6"):
        raise ValueError(f"unknown fused activation {activation!r}")
    qmin = INT8_MIN if lo is None else int(quantize(np.float32(lo), scale, zero_point))
    qmax = INT8_MAX if hi is None else int(quantize(np.float32(hi), scale, zero_point))
    return qmin, qmax
