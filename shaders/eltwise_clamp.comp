#version 450
#extension GL_GOOGLE_include_directive : require
// Standalone relu / relu6 / hardtanh on packed int8 (clamp_q8 in vkq/ops/eltwise.py):
//   REQUANT: out = requantize(q - in_zp, m, s, out_zp, qmin, qmax)
//   else:    out = clamp(q, qmin, qmax)   exactly the same when M = 1 (m = 2^30, s = 30) and
//                                         in_zp == out_zp, and much cheaper on SwiftShader
// Each invocation does PER ivec4 blocks, grid-strided; padding bytes are written 0.
//! variant
//! variant REQUANT
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int PER = 1;

layout(std430, binding = 0) readonly buffer In { ivec4 q[]; };
layout(std430, binding = 1) writeonly buffer Out { ivec4 o[]; };
layout(push_constant) uniform Params {
    ivec4 geo;       // block_mask geometry
    int blocks;
    int in_zp, m, s, out_zp, qmin, qmax;
} p;

int word(int w) {
#ifdef REQUANT
    return pack_int8x4(requantize4(unpack_int8x4(w) - p.in_zp, ivec4(p.m), ivec4(p.s), p.out_zp, p.qmin, p.qmax));
#else
    return pack_int8x4(clamp(unpack_int8x4(w), p.qmin, p.qmax));
#endif
}

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.blocks; ++k, i += stride) {
        ivec4 w = q[i];
        o[i] = ivec4(word(w.x), word(w.y), word(w.z), word(w.w)) & block_mask(i, p.geo);
    }
}
