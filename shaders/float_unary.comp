#version 450
#extension GL_GOOGLE_include_directive : require
// Elementwise float32 y = f(x) over n contiguous values (vkq/ops/float.py). Each invocation
// does PER blocks of 4 values, grid-strided: a vec4 load and store (the last, partial block
// value by value). Accuracy of the transcendental ones: include/float_math.glsl.
// Why vec4: on lavapipe a store is a loop over the SIMD lanes with a bounds check per word;
// a vec4 store costs about what two single words cost (MiniLM's GELU, bench/README.md).
// TEXEL: x through texel fetches (texel.glsl).
//! variant OP_GELU
//! variant OP_GELU_TANH
//! variant OP_CLAMP
//! variant OP_RELU
//! variant OP_SIGMOID
//! variant OP_TANH
//! variant OP_SILU
//! variant OP_EXP
//! variant OP_NEG
//! variant OP_ABS
//! variant OP_SQRT
//! variant OP_RSQRT
//! variant OP_CUBE
//! variant OP_SQUARE
//! variant OP_HARDSWISH
//! variant OP_HARDSIGMOID
//! variant OP_LEAKY_RELU
//! variant OP_ELU
//! variant OP_SOFTPLUS
//! variant OP_MISH
//! variant OP_LOG
//! variant OP_ERF
//! variant OP_ERFC
//! variant OP_FLOOR
//! variant OP_CEIL
//! variant OP_ROUND
//! variant OP_TRUNC
//! variant OP_SIGN
//! variant OP_SIN
//! variant OP_COS
//! variant OP_LOG1P
//! variant OP_LOG2
//! variant OP_POW
//! variant OP_ATAN
//! variant OP_ASIN
//! variant OP_ACOS
//! variant OP_TAN
//! variant OP_SINH
//! variant OP_COSH
//! variant OP_ASINH
//! variant OP_ACOSH
//! variant OP_ATANH
//! variant OP_EXPM1
//! variant OP_EXP2
//! variant OP_LOG10
//! variant OP_LGAMMA
//! variant OP_DIGAMMA
//! variant OP_ERFINV
//! variant OP_I0
//! variant OP_I0E
//! variant OP_I1
//! variant OP_I1E
//! variant OP_NDTRI
//! variant OP_ERFCX
//! variant OP_POLYGAMMA
//! variant OP_GELU TEXEL
//! variant OP_GELU_TANH TEXEL
//! variant OP_CLAMP TEXEL
//! variant OP_RELU TEXEL
//! variant OP_SIGMOID TEXEL
//! variant OP_TANH TEXEL
//! variant OP_SILU TEXEL
//! variant OP_EXP TEXEL
//! variant OP_NEG TEXEL
//! variant OP_ABS TEXEL
//! variant OP_SQRT TEXEL
//! variant OP_RSQRT TEXEL
//! variant OP_CUBE TEXEL
//! variant OP_SQUARE TEXEL
//! variant OP_HARDSWISH TEXEL
//! variant OP_HARDSIGMOID TEXEL
//! variant OP_LEAKY_RELU TEXEL
//! variant OP_ELU TEXEL
//! variant OP_SOFTPLUS TEXEL
//! variant OP_MISH TEXEL
//! variant OP_LOG TEXEL
//! variant OP_ERF TEXEL
//! variant OP_ERFC TEXEL
//! variant OP_FLOOR TEXEL
//! variant OP_CEIL TEXEL
//! variant OP_ROUND TEXEL
//! variant OP_TRUNC TEXEL
//! variant OP_SIGN TEXEL
//! variant OP_SIN TEXEL
//! variant OP_COS TEXEL
//! variant OP_LOG1P TEXEL
//! variant OP_LOG2 TEXEL
//! variant OP_POW TEXEL
//! variant OP_ATAN TEXEL
//! variant OP_ASIN TEXEL
//! variant OP_ACOS TEXEL
//! variant OP_TAN TEXEL
//! variant OP_SINH TEXEL
//! variant OP_COSH TEXEL
//! variant OP_ASINH TEXEL
//! variant OP_ACOSH TEXEL
//! variant OP_ATANH TEXEL
//! variant OP_EXPM1 TEXEL
//! variant OP_EXP2 TEXEL
//! variant OP_LOG10 TEXEL
//! variant OP_LGAMMA TEXEL
//! variant OP_DIGAMMA TEXEL
//! variant OP_ERFINV TEXEL
//! variant OP_I0 TEXEL
//! variant OP_I0E TEXEL
//! variant OP_I1 TEXEL
//! variant OP_I1E TEXEL
//! variant OP_NDTRI TEXEL
//! variant OP_ERFCX TEXEL
//! variant OP_POLYGAMMA TEXEL
#include "common.glsl"
#include "float_math.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int PER = 4;

IVEC4_WORDS_INPUT(0, xb)          // texel.glsl: floats as their bits
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
VEC4_OUTPUT(1, y4)   // the same words by vec4 (texel.glsl)
layout(push_constant) uniform Params {
    int n;
    float lo, hi;    // OP_CLAMP bounds (+-inf when absent); LEAKY_RELU: lo the slope; ELU: lo alpha;
                     // SOFTPLUS: lo beta, hi the threshold; POW: lo the exponent; POLYGAMMA: lo n
    float aux;       // SOFTPLUS: 1 / beta (rounded on the host)
} p;

float f(float v) {
#if defined(OP_GELU)
    return gelu_erf(v);
#elif defined(OP_GELU_TANH)
    return gelu_tanh(v);
#elif defined(OP_CLAMP)
    return isnan(v) ? v : min(max(v, p.lo), p.hi);      // (GLSL's min / max of a NaN: either operand)
#elif defined(OP_RELU)
    return isnan(v) ? v : max(v, 0.0);
#elif defined(OP_SIGMOID)
    return sigmoid_f32(v);
#elif defined(OP_TANH)
    return tanh_f32(v);
#elif defined(OP_SILU)
    return silu_f32(v);
#elif defined(OP_HARDSWISH)
    precise float a = v * clamp(v + 3.0, 0.0, 6.0);      // as ATen: x * min(max(x + 3, 0), 6) / 6
    const float h = div6_f32(ftz(a));                     // (correctly rounded: bit-exact)
    return isnan(v) ? v : h;
#elif defined(OP_HARDSIGMOID)
    precise float a = clamp(v + 3.0, 0.0, 6.0);
    const float h = div6_core(a);                         // (a = 0 or >= 2^-22: correctly rounded)
    return isnan(v) ? v : h;
#elif defined(OP_EXP)
    return ftz(exp_f32(v));      // (bit-exact: a subnormal result flushed, as a device may)
#elif defined(OP_NEG)
    return -v;
#elif defined(OP_ABS)
    return abs(v);
#elif defined(OP_SQRT)
    return sqrt_f32(v);
#elif defined(OP_RSQRT)
    return rsqrt_f32(v);
#elif defined(OP_SQUARE)
    precise float s = v * v;
    return s;
#elif defined(OP_LEAKY_RELU)
    precise float s = v * p.lo;
    return v > 0.0 ? v : s;
#elif defined(OP_ELU)
    precise float e = exp_f32(v) - 1.0;            // (bit-exact: vkq/ops/float.py elu)
    precise float s = p.lo * e;
    const float sf = ftz(s);
    return floatBitsToInt(v) > 0 ? v : sf;         // (by its bits: a subnormal x > 0 is x)
#elif defined(OP_SOFTPLUS)
    return softplus_f32(v, p.lo, p.hi, p.aux);
#elif defined(OP_MISH)
    const float vf = ftz(v);
    precise float m = vf * tanh_f32(softplus_f32(vf, 1.0, 20.0, 1.0));
    return ftz(m);
#elif defined(OP_LOG)
    return log_f32(v);
#elif defined(OP_LOG1P)
    return log1p_f32(v);
#elif defined(OP_LOG2)
    return log2_f32(v);
#elif defined(OP_POW)
    return pow_f32(v, p.lo);
#elif defined(OP_ATAN)
    return atan_f32(v);
#elif defined(OP_ASIN)
    return asin_f32(v);
#elif defined(OP_ACOS)
    return acos_f32(v);
#elif defined(OP_TAN)
    return tan_f32(v);
#elif defined(OP_SINH)
    return sinh_f32(v);
#elif defined(OP_COSH)
    return cosh_f32(v);
#elif defined(OP_ASINH)
    return asinh_f32(v);
#elif defined(OP_ACOSH)
    return acosh_f32(v);
#elif defined(OP_ATANH)
    return atanh_f32(v);
#elif defined(OP_EXPM1)
    return expm1_f32(v);
#elif defined(OP_EXP2)
    return exp2_f32(v);
#elif defined(OP_LOG10)
    return log10_f32(v);
#elif defined(OP_ERFC)
    return erfc_f32(v);
#elif defined(OP_ERF)
    return erf_f32(v);
#elif defined(OP_LGAMMA)
    return lgamma_f32(v);
#elif defined(OP_DIGAMMA)
    return digamma_f32(v);
#elif defined(OP_ERFINV)
    return erfinv_f32(v);
#elif defined(OP_I0)
    return bessel_i_f32(v, false, false);
#elif defined(OP_I0E)
    return bessel_i_f32(v, false, true);
#elif defined(OP_I1)
    return bessel_i_f32(v, true, false);
#elif defined(OP_I1E)
    return bessel_i_f32(v, true, true);
#elif defined(OP_NDTRI)
    return ndtri_f32(v);
#elif defined(OP_ERFCX)
    return erfcx_f32(v);
#elif defined(OP_POLYGAMMA)
    return polygamma_f32(v, int(p.lo));
#elif defined(OP_FLOOR)
    return floor(v);
#elif defined(OP_CEIL)
    return ceil(v);
#elif defined(OP_ROUND)
    return roundEven(v);             // torch.round: half to even
#elif defined(OP_TRUNC)
    return trunc(v);
#elif defined(OP_SIGN)
    return isnan(v) ? 0.0 : sign(v);      // (torch.sign(NaN) = 0; GLSL leaves sign(NaN) undefined)
#elif defined(OP_SIN)
    return sincos_f32(v, false);
#elif defined(OP_COS)
    return sincos_f32(v, true);
#elif defined(OP_CUBE)
    precise float s = v * v;      // (x * x) * x, as ATen's pow(x, 3)
    precise float c = s * v;
    return c;
#endif
}

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();                  // block i: values 4i .. 4i + 3
    for (int k = 0; k < PER && 4 * i < p.n; ++k, i += stride) {
        if (4 * i + 4 <= p.n) {
            const vec4 v = intBitsToFloat(LOAD4(xb, i));
            STORE_VEC4(y4, i, vec4(f(v.x), f(v.y), f(v.z), f(v.w)));
        } else {
            for (int e = 4 * i; e < p.n; ++e) y[e] = f(intBitsToFloat(WORD(xb, e)));
        }
    }
}
