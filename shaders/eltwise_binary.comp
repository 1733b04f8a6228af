#version 450
#extension GL_GOOGLE_include_directive : require
// int8 a (op) b -> int8, a, b and out of one shape and packed layout (vkq/ops/eltwise.py).
// Each invocation does PER ivec4 blocks (16 values each), grid-strided.
//   OP_ADD: acc = (a - a_zp) * a_mult + (b - b_zp) * b_mult      (add_q8, exact in int32)
//   OP_MUL: acc = (a - a_zp) * (b - b_zp)                         (mul_q8, |acc| <= 255^2)
//   out = requantize(acc, m, s, out_zp, qmin, qmax); padding bytes are written 0.
//! variant OP_ADD
//! variant OP_MUL
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int PER = 1;

layout(std430, binding = 0) readonly buffer A { ivec4 a[]; };
layout(std430, binding = 1) readonly buffer B { ivec4 b[]; };
layout(std430, binding = 2) writeonly buffer Out { ivec4 o[]; };
layout(push_constant) uniform Params {
    ivec4 geo;       // block_mask geometry
    int blocks;
    int a_zp, b_zp, a_mult, b_mult;
    int m, s, out_zp, qmin, qmax;
} p;

// four values of a and of b (one word each) -> four outputs (one word)
int word(int wa, int wb) {
    ivec4 x = unpack_int8x4(wa) - p.a_zp;
    ivec4 y = unpack_int8x4(wb) - p.b_zp;
#ifdef OP_ADD
    ivec4 acc = x * p.a_mult + y * p.b_mult;
#else
    ivec4 acc = x * y;
#endif
    return pack_int8x4(requantize4(acc, ivec4(p.m), ivec4(p.s), p.out_zp, p.qmin, p.qmax));
}

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.blocks; ++k, i += stride) {
        ivec4 wa = a[i], wb = b[i];
        o[i] = ivec4(word(wa.x, wb.x), word(wa.y, wb.y), word(wa.z, wb.z), word(wa.w, wb.w))
               & block_mask(i, p.geo);
    }
}
