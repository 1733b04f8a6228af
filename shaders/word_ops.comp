#version 450
#extension GL_GOOGLE_include_directive : require
// Elementwise ops on 32-bit words with numpy broadcasting (vkq/ops/logic.py): the integer and
// boolean arithmetic of ids and attention masks, comparisons, casts and where. int32 holds
// every integer and bool tensor (bool: 0 / 1). Iteration over the output (rank <= 6 merged),
// operands read through broadcast strides (0: broadcast); mode 1: b is the scalar word.
//   I_ADD/I_SUB/I_MUL/I_AND/I_OR/I_XOR     int32 a (op) b (wrapping)
//   I_MAXIMUM, I_MINIMUM                   int32 max / min
//   I_REM, I_FLOORDIV                      int32 remainder / floor division as Python's (the
//                                          remainder has the divisor's sign; by 0: 0), from the
//                                          truncating division (SPIR-V OpSDiv), then corrected
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
        uint x = a[oa];
        uint y = p.mode == 1 ? p.scalar : b[ob];
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
