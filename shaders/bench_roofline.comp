#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#if defined(DOT4_I8)
#extension GL_EXT_spirv_intrinsics : require
// OpSDotAccSat (4453), packed 4x8 format (0); capabilities DotProduct (6019),
// DotProductInput4x8BitPacked (6018): the device must enable shaderIntegerDotProduct.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4453)
int sdot4x8_acc_sat(int a, int b, int acc, spirv_literal int packed_format);
#endif
// Synthetic shaders that measure what a device can do at all (vkq/bench/roofline.py):
//   FMA_F32: ITERS x NACC independent vec4 multiply-adds per invocation (2 flops per lane), the
//            accumulators an unrolled array; vkq/bench/roofline.py takes the best NACC (which
//            wins depends on the registers). Written as 8 named variables, lavapipe ran this at
//            half the rate (118 against 214 GOP/s, the same outputs): a roof kernels beat.
//   MAD_I32: the same with ivec4 multiply + add (2 ops per lane)
//   DOT4_I8: the same with a 4 x int8 dot product + saturating accumulate per lane (8 ops);
//            each accumulator is also one of its own dot product's operands, so that no
//            compiler can hoist the dot product out of the loop
//   COPY:    ITERS ivec4 loads and stores per invocation, grid-strided (bandwidth); with TEXEL
//            the loads are texel fetches and the stores as the kernels' own, the path they take
//            on such a device (texel.glsl)
//! variant FMA_F32 NACC=4
//! variant MAD_I32 NACC=4
//! variant DOT4_I8 NACC=4
//! variant FMA_F32 NACC=8
//! variant MAD_I32 NACC=8
//! variant DOT4_I8 NACC=8
//! variant FMA_F32 NACC=16
//! variant MAD_I32 NACC=16
//! variant DOT4_I8 NACC=16
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
#ifndef NACC
#define NACC 8     // independent vec4 accumulators an invocation (the variants set it)
#endif
#if defined(COPY)
IVEC4_INPUT(0, src)
#else
layout(std430, binding = 0) readonly buffer In { ivec4 src[]; };
#endif
IVEC4_OUTPUT(1, dst)
layout(push_constant) uniform Params { int n; } p;

void main() {
    int i = linear_invocation();
#if defined(COPY)
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    for (int k = 0; k < ITERS; ++k, i += stride)
        if (i < p.n) STORE4(dst, i, LOAD4(src, i));
#else
    if (i >= p.n) return;
#if defined(FMA_F32)
#define T vec4
    T m = intBitsToFloat(src[i]) * 1e-30 + 0.999, c = T(1e-3);
#else
#define T ivec4
    T m = src[i] | 1, c = T(7);
#endif
    T a[NACC];
    [[unroll]] for (int j = 0; j < NACC; ++j) a[j] = T(i + j);
    for (int k = 0; k < ITERS; ++k) {
        [[unroll]] for (int j = 0; j < NACC; ++j)
#if defined(DOT4_I8)
            a[j] = dot4_acc(a[j], m);
#else
            a[j] = a[j] * m + c;
#endif
    }
    T s = a[0];
    [[unroll]] for (int j = 1; j < NACC; ++j) s += a[j];
#if defined(FMA_F32)
    STORE4(dst, i, floatBitsToInt(s));
#else
    STORE4(dst, i, s);
#endif
#endif
}
