#version 450
#extension GL_GOOGLE_include_directive : require
// int8 a (op) b -> int8, a, b and out of one shape and packed layout (vkq/ops/eltwise.py).
// One invocation per ivec4 block: 16 values, three 16-byte accesses.
//   OP_ADD: acc = (a - a_zp) * a_mult + (b - b_zp) * b_mult      (add_q8, exact in int32)
//   OP_MUL: acc = (a - a_zp) * (b - b_zp)                         (mul_q8, |acc| <= 255^2)
//   out = requantize(acc, m, s, out_zp, qmin, qmax); padding bytes are written 0.
//! variant OP_ADD
//! variant OP_MUL
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(std430, binding = 0) readonly buffer A { ivec4 a[]; };
layout(std430, binding = 1) readonly buffer B { ivec4 b[]; };
layout(std430, binding = 2) writeonly buffer Out { ivec4 o[]; };
layout(push_constant) uniform Params {
    ivec4 geo;       // block_mask geometry
    int blocks;
    int a_zp, b_zp, a_mult, b_mult;
    int m, s, out_zp, qmin, qmax;
} p;

void main() {
    int i = linear_invocation();
    if (i >= p.blocks) return;
    ivec4 wa = a[i], wb = b[i], r;
    for (int j = 0; j < 4; ++j) {
        ivec4 x = unpack_int8x4(wa[j]) - p.a_zp;
        ivec4 y = unpack_int8x4(wb[j]) - p.b_zp;
#ifdef OP_ADD
        ivec4 acc = x * p.a_mult + y * p.b_mult;
#else
        ivec4 acc = x * y;
#endif
        r[j] = pack_int8x4(requantize4(acc, ivec4(p.m), ivec4(p.s), p.out_zp, p.qmin, p.qmax));
    }
    o[i] = r & block_mask(i, p.geo);
}
