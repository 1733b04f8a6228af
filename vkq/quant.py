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
"""
from __future__ import annotations

import numpy as np

INT8_MIN, INT8_MAX = -128, 127


def quantize(x, scale: float, zero_point: int, qmin: int = INT8_MIN, qmax: int = INT8_MAX) -> np.ndarray:
    """Float -> int8 per tensor, bit-exact with quantized_decomposed.quantize_per_tensor."""
    x = np.asarray(x, dtype=np.float32)
    inv = inverse_scale(scale)
    q = np.rint(x * inv) + np.float32(zero_point)
    return np.clip(q, qmin, qmax).astype(np.int8)


def inverse_scale(scale: float) -> np.float32:
    """1/scale as PyTorch forms it: divided in double, then used as a float32 operand."""
    return np.float32(1.0 / float(scale))


def dequantize(q, scale: float, zero_point: int) -> np.ndarray:
    """int8 -> float per tensor, as quantized_decomposed.dequantize_per_tensor."""
    return ((np.asarray(q).astype(np.int32) - np.int32(zero_point)).astype(np.float32)
            * np.float32(scale))


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


def requantize(acc, m, s, zero_point: int, qmin: int = INT8_MIN, qmax: int = INT8_MAX) -> np.ndarray:
    """int32 accumulators -> int8 with the fixed-point multiplier (m, s) (scalars or per channel,
    broadcast against acc). The specification the shaders implement."""
    acc = np.asarray(acc, dtype=np.int64)
    m = np.asarray(m, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    biased = acc * m + (np.int64(1) << (s - 1))      # exact: |acc * m| < 2^62
    r = biased >> s
    tie = (biased & ((np.int64(1) << s) - 1)) == 0    # acc * m / 2^s was exactly k + 1/2
    r = r - (tie & (r & 1).astype(bool))
    r = np.clip(r, -(1 << 16), 1 << 16) + zero_point
    return np.clip(r, qmin, qmax).astype(np.int8)


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
