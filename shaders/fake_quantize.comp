#version 450
#extension GL_GOOGLE_include_directive : require
// float32 y = dequantize(quantize(x)) per tensor over n contiguous values (vkq/ops/io.py
// fake_quantize): PT2E's quantize / dequantize pair where nothing else reads the int8 value
// (the scores between a static attention's float ops), one pass of float in and float out by
// vec4s, as float_unary's blocks (the last, partial block value by value); each value as
// fake_quant.glsl computes it. Where the float op that produces x has no other reader, the pair
// folds into it instead (vkq/ops/float.py fold_fake_quantize).
// The pair took two passes through a packed int8 tensor, value by value where its rows are not
// whole vec4s: Swin-T's (64, 3, 49, 49) scores, quantize 3.1 + dequantize 2.4 ms -> 1.4 ms on lavapipe.
// TEXEL: x through texel fetches (texel.glsl).
//! variant
//! variant TEXEL
#include "common.glsl"
#include "texel.glsl"
#include "fake_quant.glsl"

layout(constant_id = 3) const int PER = 4;

IVEC4_WORDS_INPUT(0, xb)          // texel.glsl: floats as their bits
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
VEC4_OUTPUT(1, y4)   // the same words by vec4 (texel.glsl)
layout(push_constant) uniform Params {
    int n;
    FakeQuant fq;
} p;

float fq(float v) { return fake_quantize(v, p.fq); }

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();                  // block i: values 4i .. 4i + 3
    for (int k = 0; k < PER && 4 * i < p.n; ++k, i += stride) {
        if (4 * i + 4 <= p.n) {
            const vec4 v = intBitsToFloat(LOAD4(xb, i));
            STORE_VEC4(y4, i, vec4(fq(v.x), fq(v.y), fq(v.z), fq(v.w)));
        } else {
            for (int e = 4 * i; e < p.n; ++e) y[e] = fq(intBitsToFloat(WORD(xb, e)));
        }
    }
}
