#version 450
#extension GL_GOOGLE_include_directive : require
#if defined(DOT4_I8)
#extension GL_EXT_spirv_intrinsics : require
// OpSDotAccSat (4453), packed 4x8 format (0); capabilities DotProduct (6019),
// DotProductInput4x8BitPacked (6018): the device must enable shaderIntegerDotProduct.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4453)
int sdot4x8_acc_sat(int a, int b, int acc, spirv_literal int packed_format);
#endif
// Synthetic shaders that measure what a device can do at all (vkq/bench/roofline.py):
//   FMA_F32: ITERS x 8 independent vec4 multiply-adds per invocation (2 flops per lane)
//   MAD_I32: the same with ivec4 multiply + add (2 ops per lane)
//   DOT4_I8: the same with a 4 x int8 dot product + saturating accumulate per lane (8 ops);
//            each accumulator is also one of its own dot product's operands, so that no
//            compiler can hoist the dot product out of the loop
//   COPY:    ITERS ivec4 loads and stores per invocation, grid-strided (bandwidth); with TEXEL
//            the loads are texel fetches, the path the kernels take on such a device (texel.glsl)
//! variant FMA_F32
//! variant MAD_I32
//! variant DOT4_I8
//! variant COPY
//! variant COPY TEXEL
#include "common.glsl"
#include "texel.glsl"

#if defined(DOT4_I8)
ivec4 dot4_acc(ivec4 a, ivec4 b) {
    return ivec4(sdot4x8_acc_sat(a.x, b.x, a.x, 0), sdot4x8_acc_sat(a.y, b.y, a.y, 0),
                 sdot4x8_acc_sat(a.z, b.z, a.z, 0), sdot4x8_acc_sat(a.w, b.w, a.w, 0));
}
#endif

layout(constant_id = 3) const int ITERS = 256;
#if defined(COPY)
IVEC4_INPUT(0, src)
#else
layout(std430, binding = 0) readonly buffer In { ivec4 src[]; };
#endif
layout(std430, binding = 1) writeonly buffer Out { ivec4 dst[]; };
layout(push_constant) uniform Params { int n; } p;

void main() {
    int i = linear_invocation();
#if defined(COPY)
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    for (int k = 0; k < ITERS; ++k, i += stride)
        if (i < p.n) dst[i] = LOAD4(src, i);
#else
    if (i >= p.n) return;
#if defined(FMA_F32)
#define T vec4
    T m = intBitsToFloat(src[i]) * 1e-30 + 0.999, c = T(1e-3);
#else
#define T ivec4
    T m = src[i] | 1, c = T(7);
#endif
    T a0 = T(i), a1 = a0 + T(1), a2 = a0 + T(2), a3 = a0 + T(3);
    T a4 = a0 + T(4), a5 = a0 + T(5), a6 = a0 + T(6), a7 = a0 + T(7);
    for (int k = 0; k < ITERS; ++k) {
#if defined(DOT4_I8)
        a0 = dot4_acc(a0, m); a1 = dot4_acc(a1, m); a2 = dot4_acc(a2, m); a3 = dot4_acc(a3, m);
        a4 = dot4_acc(a4, m); a5 = dot4_acc(a5, m); a6 = dot4_acc(a6, m); a7 = dot4_acc(a7, m);
#else
        a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
        a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
#endif
    }
    T s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
#if defined(FMA_F32)
    dst[i] = floatBitsToInt(s);
#else
    dst[i] = s;
#endif
#endif
}
