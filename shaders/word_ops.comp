#version 450
#extension GL_GOOGLE_include_directive : require
// Elementwise ops on 32-bit words with numpy broadcasting (vkq/ops/logic.py): the integer and
// boolean arithmetic of ids and attention masks, comparisons, casts and where. int32 holds
// every integer and bool tensor (bool: 0 / 1). Iteration over the output (rank <= 6 merged),
// operands read through broadcast strides (0: broadcast); mode 1: b is the scalar word, mode 2:
// a is (the scalar first: 2 ** x).
//   I_ADD/I_SUB/I_MUL/I_AND/I_OR/I_XOR     int32 a (op) b (wrapping)
//   I_MAXIMUM, I_MINIMUM                   int32 max / min
//   I_REM, I_FLOORDIV                      int32 remainder / floor division as Python's (the
//                                          remainder has the divisor's sign; by 0: 0), from the
//                                          truncating division (SPIR-V OpSDiv), then corrected
//   I_FMOD, I_TRUNCDIV                     int32 remainder and quotient of the truncating division
//                                          (C's % and /; by 0: 0; INT_MIN / -1 wraps)
//   F_REM, F_FLOORDIV, F_FMOD              float32 as ATen: fmod exact (the mantissas' long division),
//                                          remainder = fmod + y where the signs differ, floor
//                                          division = (x - fmod) / y rounded to its integer
//   F_TRUNCDIV                             float32 trunc(x / y) of the correctly rounded quotient
//   F_ATAN2, F_HYPOT, F_POW, F_COPYSIGN    float32 atan2(x, y), hypot, x^y (float_math.glsl), copysign
//   I_EQ ... I_GE, F_EQ ... F_GE           int32 / float32 comparisons -> bool
//   CAST_I2F, CAST_F2I (toward 0), CAST_I2B, CAST_F2B (x != 0)     unary
//   NOT                                    bool -> 1 - x
//   WHERE                                  a != 0 ? b : c  (words of any 32-bit type)
//! variant I_ADD
//! variant I_SUB
//! variant I_MUL
//! variant I_AND
//! variant I_OR
//! variant I_XOR
//! variant I_REM
//! variant I_FLOORDIV
//! variant I_FMOD
//! variant I_TRUNCDIV
//! variant F_REM
//! variant F_FLOORDIV
//! variant F_TRUNCDIV
//! variant F_FMOD
//! variant F_ATAN2
//! variant F_HYPOT
//! variant F_POW
//! variant F_COPYSIGN
//! variant I_MAXIMUM
//! variant I_MINIMUM
//! variant I_EQ
//! variant I_NE
//! variant I_LT
//! variant I_LE
//! variant I_GT
//! variant I_GE
//! variant F_EQ
//! variant F_NE
//! variant F_LT
//! variant F_LE
//! variant F_GT
//! variant F_GE
//! variant CAST_I2F
//! variant CAST_F2I
//! variant CAST_I2B
//! variant CAST_F2B
//! variant NOT
//! variant WHERE
#include "common.glsl"
#include "float_math.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
layout(std430, binding = 2) readonly buffer C { uint c[]; };
layout(std430, binding = 3) writeonly buffer Out { uint o[]; };
layout(push_constant) uniform Params {
    int n, rank, mode;
    uint scalar;
    int shape[6];
    int sa[6], sb[6], sc[6];
} p;

uint bool_word(bool v) { return v ? 1u : 0u; }

// C's fmod(x, y), exact as C's is: |x| = mx 2^ex, |y| = my 2^ey with 24-bit integer mantissas,
// the remainder of mx 2^(ex - ey) by my taken 8 bits a step (r < my < 2^24: r << 8 fits a
// uint), the sign x's (fmod(-4, 2) = -0). y = 0, x infinite or a NaN: NaN; y infinite: x.
float fmod_f32(float x, float y) {
    if (isnan(x) || isnan(y) || isinf(x) || y == 0.0) return uintBitsToFloat(0x7fc00000u);
    float ax = abs(x), ay = abs(y);
    if (isinf(ay) || ax < ay) return x;
    int ex, ey;
    float fx = frexp(ax, ex), fy = frexp(ay, ey);              // [0.5, 1)
    uint mx = uint(fx * 16777216.0), my = uint(fy * 16777216.0), r = mx % my;
    for (int d = ex - ey; d > 0; d -= 8) r = (r << min(d, 8)) % my;
    float m = ldexp(float(r), ey - 24);
    return floatBitsToInt(x) < 0 ? -m : m;
}

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
        int oa = 0, ob = 0, oc = 0, t = i;
        for (int d = p.rank - 1; d >= 0; --d) {
            int s = p.shape[d], j = t % s;
            t /= s;
            oa += j * p.sa[d];
            ob += j * p.sb[d];
            oc += j * p.sc[d];
        }
        uint x = p.mode == 2 ? p.scalar : a[oa];
        uint y = p.mode == 1 ? p.scalar : p.mode == 2 ? a[oa] : b[ob];
        int xi = int(x), yi = int(y);
        float xf = uintBitsToFloat(x), yf = uintBitsToFloat(y);
        uint r;
#if defined(I_ADD)
        r = uint(xi + yi);
#elif defined(I_SUB)
        r = uint(xi - yi);
#elif defined(I_MUL)
        r = uint(xi * yi);
#elif defined(I_AND)
        r = x & y;
#elif defined(I_OR)
        r = x | y;
#elif defined(I_XOR)
        r = x ^ y;
#elif defined(I_MAXIMUM)
        r = uint(max(xi, yi));
#elif defined(I_MINIMUM)
        r = uint(min(xi, yi));
#elif defined(I_ABS)
        r = xi < 0 ? 0u - x : x;          // (wraps at INT_MIN, as torch's int abs does)
#elif defined(I_SIGN)
        r = uint(int(xi > 0) - int(xi < 0));
#elif defined(I_FMOD) || defined(I_TRUNCDIV)
        const int d = yi == 0 || yi == -1 ? 1 : yi;        // (no division by 0 or INT_MIN / -1, as below)
#ifdef I_FMOD
        r = yi == 0 || yi == -1 ? 0u : uint(xi - (xi / d) * yi);
#else
        r = yi == 0 ? 0u : yi == -1 ? 0u - x : uint(xi / d);
#endif
#elif defined(F_FMOD)
        r = floatBitsToUint(fmod_f32(xf, yf));
#elif defined(F_REM)
        precise float m = fmod_f32(xf, yf);
        precise float mb = m + yf;
        r = floatBitsToUint(m != 0.0 && (yf < 0.0) != (m < 0.0) ? mb : m);
#elif defined(F_FLOORDIV)
        // ATen's div_floor_floating: exact where |x / y| < 2^20 (the quotient's rounding by
        // Vulkan's division, <= 2.5 ulp, is then under 1/2 of the integer it rounds to)
        precise float m = fmod_f32(xf, yf);
        precise float q = (xf - m) / yf;
        if (m != 0.0 && (yf < 0.0) != (m < 0.0)) q = q - 1.0;
        float fl = floor(q);
        fl = q - fl > 0.5 ? fl + 1.0 : fl;
        const bool negative = (floatBitsToInt(xf) < 0) != (floatBitsToInt(yf) < 0);
        fl = q == 0.0 ? (negative ? -0.0 : 0.0) : fl;
        if (yf == 0.0)       // x / 0: +-inf by the signs, NaN for 0 / 0 or a NaN
            fl = isnan(xf) || xf == 0.0 ? uintBitsToFloat(0x7fc00000u) : uintBitsToFloat(negative ? 0xff800000u : 0x7f800000u);
        r = floatBitsToUint(fl);
#elif defined(F_TRUNCDIV)
        // ATen's div_trunc: trunc of the correctly rounded x / y, which Vulkan's division is not
        // (6 / 3 may come out 1.9999999). t = |trunc| of the exact quotient, by fmod as F_FLOORDIV
        // (exact where |x / y| < 2^20); the rounded quotient reaches t + 1 where the fraction short
        // of it, (|y| - |fmod|) / |y|, is at most half the gap below t + 1 (a tie rounds to t + 1:
        // an integer under 2^24 has an even mantissa). |y| - |fmod| is exact where that can hold
        // (|fmod| >= |y| / 2, Sterbenz), and either side scales by a power of 2 exactly.
        const bool negative = (floatBitsToInt(xf) < 0) != (floatBitsToInt(yf) < 0);
        float tr;
        if (isnan(xf) || isnan(yf) || (isinf(xf) && isinf(yf)) || (xf == 0.0 && yf == 0.0)) {
            tr = uintBitsToFloat(0x7fc00000u);
        } else if (isinf(xf) || yf == 0.0) {
            tr = uintBitsToFloat(0x7f800000u);
        } else if (isinf(yf)) {
            tr = 0.0;
        } else {
            precise float m = fmod_f32(xf, yf);
            precise float q = abs((xf - m) / yf);
            float t = floor(q);
            t = q - t > 0.5 ? t + 1.0 : t;
            precise float gap = abs(yf) - abs(m);
            int e;
            frexp(t + 1.0, e);                                   // t + 1 in [2^(e-1), 2^e)
            const int half_gap = t + 1.0 == ldexp(1.0, e - 1) ? e - 26 : e - 25;     // its log2
            const bool up = abs(yf) > 18446744073709551616.0 ? gap <= ldexp(abs(yf), half_gap)
                                                              : ldexp(gap, -half_gap) <= abs(yf);
            tr = up ? t + 1.0 : t;
        }
        r = floatBitsToUint(tr) | (negative && !isnan(tr) ? 0x80000000u : 0u);
#elif defined(F_ATAN2)
        r = floatBitsToUint(atan2_f32(xf, yf));
#elif defined(F_HYPOT)
        r = floatBitsToUint(hypot_f32(xf, yf));
#elif defined(F_POW)
        r = floatBitsToUint(pow_f32(xf, yf));
#elif defined(F_COPYSIGN)
        r = (x & 0x7fffffffu) | (y & 0x80000000u);
#elif defined(I_REM) || defined(I_FLOORDIV)
        // no division by 0 or of INT_MIN by -1 reaches the hardware (x86's idiv traps on both,
        // and a select may evaluate both sides): the divisor is made safe first
        const int d = yi == 0 || yi == -1 ? 1 : yi;
        int q = yi == -1 ? -xi : xi / d, m = xi - q * yi;
        if (m != 0 && (m < 0) != (yi < 0)) { m += yi; q -= 1; }
        if (yi == 0) { q = 0; m = 0; }
#ifdef I_REM
        r = uint(m);
#else
        r = uint(q);
#endif
#elif defined(I_EQ)
        r = bool_word(xi == yi);
#elif defined(I_NE)
        r = bool_word(xi != yi);
#elif defined(I_LT)
        r = bool_word(xi < yi);
#elif defined(I_LE)
        r = bool_word(xi <= yi);
#elif defined(I_GT)
        r = bool_word(xi > yi);
#elif defined(I_GE)
        r = bool_word(xi >= yi);
#elif defined(F_EQ)
        r = bool_word(xf == yf);
#elif defined(F_NE)
        r = bool_word(xf != yf);
#elif defined(F_LT)
        r = bool_word(xf < yf);
#elif defined(F_LE)
        r = bool_word(xf <= yf);
#elif defined(F_GT)
        r = bool_word(xf > yf);
#elif defined(F_GE)
        r = bool_word(xf >= yf);
#elif defined(CAST_I2F)
        r = floatBitsToUint(float(xi));
#elif defined(CAST_F2I)
        r = uint(int(xf));
#elif defined(CAST_I2B)
        r = bool_word(x != 0u);
#elif defined(CAST_F2B)
        r = bool_word(xf != 0.0);
#elif defined(NOT)
        r = 1u - x;
#else
        r = x != 0u ? y : c[oc];
#endif
        o[i] = r;
    }
}
