#ifndef VKQ_REQUANT_GLSL
#define VKQ_REQUANT_GLSL
// Fixed-point requantization, 32-bit integer operations only (no int64: SwiftShader and
// many phones lack it). The specification is vkq/quant.py:requantize; keep them in step.
//   M ~= m * 2^-s, m in [2^30, 2^31) (or 0), s in [1, 62]
//   r   = round_half_to_even(acc * m / 2^s)        exact, via the 64-bit product hi:lo:
//       = floor((acc * m + 2^(s-1)) / 2^s), less 1 if that is odd and the division was a tie
//   out = clamp(clamp(r, -2^16, 2^16) + zero_point, qmin, qmax)

const int REQUANT_SATURATE = 65536;

// round_half_to_even(acc * m / 2^s), saturated to +-2^16
int fixed_point_multiply(int acc, int m, int s) {
    int hi, lo_bits;
    imulExtended(acc, m, hi, lo_bits);   // acc * m = hi * 2^32 + uint(lo); |acc * m| < 2^62
    uint lo = uint(lo_bits);
    bool tie;                            // after + 2^(s-1), the s bits shifted out are all 0
    if (s <= 32) {                       // + 2^(s-1): into the low word, carry into hi
        uint carry;
        lo = uaddCarry(lo, 1u << (s - 1), carry);
        hi += int(carry);
        tie = (lo & (0xFFFFFFFFu >> (32 - s))) == 0u;
    } else {
        hi += 1 << (s - 33);
        tie = lo == 0u && (hi & ((1 << (s - 32)) - 1)) == 0;
    }
    if (s >= 32) {
        int r = hi >> (s - 32);
        return clamp(r - int(tie && (r & 1) != 0), -REQUANT_SATURATE, REQUANT_SATURATE);
    }
    int low = int((lo >> s) | (uint(hi) << (32 - s)));   // low word of the shifted product
    int high = hi >> s;                                   // its high word
    if (high != (low >> 31)) return high < 0 ? -REQUANT_SATURATE : REQUANT_SATURATE;
    return clamp(low - int(tie && (low & 1) != 0), -REQUANT_SATURATE, REQUANT_SATURATE);
}

int requantize(int acc, int m, int s, int zero_point, int qmin, int qmax) {
    return clamp(fixed_point_multiply(acc, m, s) + zero_point, qmin, qmax);
}

// The same int8 result as requantize(acc, m, s, ...) for every int32 acc, in about a third of
// the operations, with per-channel constants prepared on the host (vkq/quant.py:
// requant_clamp_params says why it is exact): no branch on s, one imulExtended.
//   a = clamp(acc, -bound - 1, bound) << lshift
//   r = round_half_to_even(a * m / 2^(32 + rshift)),  rshift in [1, 30]
// ties = false (a compile-time constant where the host proved that no accumulator lands exactly
// half way, vkq/quant.py:requant_tie_free) drops the round-half-to-even correction.
// frac (vkq/quant.py:split_bias, requant_clamp_frac; |frac| <= 2^30) is a bias fraction in units
// of 1/m, added to the product as frac << lshift; fractions = false (compile-time) skips it.
int requantize_clamped(int acc, int bound, int lshift, int m, int rshift, int frac, int zero_point, int qmin,
                       int qmax, bool ties, bool fractions) {
    int hi, lo;
    imulExtended(clamp(acc, ~bound, bound) << lshift, m, hi, lo);   // ~bound = -bound - 1
    if (fractions) {   // hi:lo += frac << lshift (lshift <= 30), 64-bit with carry
        uint carry;
        lo = int(uaddCarry(uint(lo), uint(frac) << lshift, carry));
        hi += ((frac >> (31 - lshift)) >> 1) + int(carry);   // frac >> (32 - lshift), never a shift by 32
    }
    hi += 1 << (rshift - 1);                       // + 2^(31 + rshift), half the divisor
    int r = hi >> rshift;
    // a tie (the bits shifted out are 0 in both words) rounds to even. Branch-free: with `&&`
    // and `?:` here, two chained requantizations (conv_epilogue.glsl's RESIDUAL) took
    // SwiftShader's shader compiler minutes per pipeline; this form compiles in a blink.
    const int tie = int(ties) & int((lo | (hi & ((1 << rshift) - 1))) == 0);
    return clamp(r - (tie & r & 1) + zero_point, qmin, qmax);
}

int requantize_clamped(int acc, int bound, int lshift, int m, int rshift, int zero_point, int qmin, int qmax,
                       bool ties) {
    return requantize_clamped(acc, bound, lshift, m, rshift, 0, zero_point, qmin, qmax, ties, false);
}

int requantize_clamped(int acc, int bound, int lshift, int m, int rshift, int zero_point, int qmin, int qmax) {
    return requantize_clamped(acc, bound, lshift, m, rshift, 0, zero_point, qmin, qmax, true, false);
}

ivec4 requantize4(ivec4 acc, ivec4 m, ivec4 s, int zero_point, int qmin, int qmax) {
    return ivec4(requantize(acc.x, m.x, s.x, zero_point, qmin, qmax),
                 requantize(acc.y, m.y, s.y, zero_point, qmin, qmax),
                 requantize(acc.z, m.z, s.z, zero_point, qmin, qmax),
                 requantize(acc.w, m.w, s.w, zero_point, qmin, qmax));
}
#endif
